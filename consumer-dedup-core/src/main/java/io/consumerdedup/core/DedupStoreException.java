package io.consumerdedup.core;

import org.jspecify.annotations.Nullable;

/**
 * The dedup store failed, after retrying transient errors; the message says what was not recorded.
 */
public class DedupStoreException extends DedupException {
  private static final long serialVersionUID = 1L;

  public DedupStoreException(
      String message, @Nullable DedupKey key, @Nullable String source, @Nullable Throwable cause) {
    super(message, key, source, cause);
  }
}
