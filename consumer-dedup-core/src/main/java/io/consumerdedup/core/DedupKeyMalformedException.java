package io.consumerdedup.core;

import org.jspecify.annotations.Nullable;

/**
 * A delivery carries a key that cannot be used: bytes that are not UTF-8, a control character, a
 * type name too long, a key of the form long keys are stored in ({@code sha256:} and 64 hex digits,
 * {@link DedupKey#isHashedForm}). Not retryable: a redelivery carries the same data.
 */
public class DedupKeyMalformedException extends DedupException {
  private static final long serialVersionUID = 1L;

  public DedupKeyMalformedException(
      String message, @Nullable String source, @Nullable Throwable cause) {
    super(message, null, source, cause);
  }

  /** {@link Disposition#DEAD_LETTER}: a redelivery carries the same data. */
  @Override
  public Disposition disposition() {
    return Disposition.DEAD_LETTER;
  }
}
