package io.consumerdedup.core;

import org.jspecify.annotations.Nullable;

/**
 * A delivery carries a key that cannot be used: bytes that are not UTF-8, a control character, a
 * type name too long. Not retryable: a redelivery carries the same data.
 */
public class DedupKeyMalformedException extends DedupKeyMissingException {
  private static final long serialVersionUID = 1L;

  public DedupKeyMalformedException(
      String message, @Nullable String source, @Nullable Throwable cause) {
    super(message, source, cause);
  }
}
