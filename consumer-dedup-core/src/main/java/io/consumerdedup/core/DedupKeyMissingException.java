package io.consumerdedup.core;

import org.jspecify.annotations.Nullable;

/**
 * No business key could be derived from a delivery (an absent, empty or malformed header, an
 * invalid key). Not retryable: a redelivery carries the same data.
 */
public class DedupKeyMissingException extends DedupException {
  private static final long serialVersionUID = 1L;

  public DedupKeyMissingException(
      String message, @Nullable String source, @Nullable Throwable cause) {
    super(message, null, source, cause);
  }

  /** {@link Disposition#DEAD_LETTER}: a redelivery carries the same data. */
  @Override
  public Disposition disposition() {
    return Disposition.DEAD_LETTER;
  }
}
