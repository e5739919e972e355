package io.consumerdedup.core;

/** What {@link IdempotentExecutor#execute} did with a delivery. */
public enum Outcome {
  /** The handler ran (first delivery, a retry after FAILED, or a takeover of an expired lease). */
  PROCESSED,
  /** The key had already succeeded; the handler did not run. */
  DUPLICATE
}
