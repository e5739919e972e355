package io.consumerdedup.core;

import org.jspecify.annotations.Nullable;

/**
 * A delivery carries a key that was already claimed with a different payload fingerprint: two
 * different business actions share one key, or the message was altered. Not retryable.
 */
public class DedupKeyConflictException extends DedupException {
  private static final long serialVersionUID = 1L;

  private final String storedFingerprint;
  private final String deliveredFingerprint;

  public DedupKeyConflictException(
      DedupKey key,
      String storedFingerprint,
      String deliveredFingerprint,
      @Nullable String source) {
    super(
        "Payload differs from the one first seen under this key (fingerprint "
            + deliveredFingerprint
            + ", stored "
            + storedFingerprint
            + "); not applied",
        key,
        source,
        null);
    this.storedFingerprint = storedFingerprint;
    this.deliveredFingerprint = deliveredFingerprint;
  }

  public String storedFingerprint() {
    return storedFingerprint;
  }

  public String deliveredFingerprint() {
    return deliveredFingerprint;
  }

  /** {@link Disposition#DEAD_LETTER}: a redelivery carries the same payload. */
  @Override
  public Disposition disposition() {
    return Disposition.DEAD_LETTER;
  }
}
