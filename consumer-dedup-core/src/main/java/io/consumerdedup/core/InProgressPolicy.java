package io.consumerdedup.core;

/** What the executor does when another consumer holds a live lease on the key. */
public enum InProgressPolicy {
  /** Throw {@link DedupInProgressException} at once, so the caller retries the delivery later. */
  THROW,
  /**
   * Poll the key with a bounded back-off until the holder finishes (then: duplicate, or a retry
   * after its failure) or the wait timeout passes (then: {@link DedupInProgressException}).
   */
  WAIT
}
