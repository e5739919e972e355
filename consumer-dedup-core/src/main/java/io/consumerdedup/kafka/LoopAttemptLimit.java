package io.consumerdedup.kafka;

import io.consumerdedup.core.DedupAttemptsExhaustedException;
import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.internal.SpentAttempts;
import org.jspecify.annotations.Nullable;

/**
 * The attempt limit ({@code maxAttempts}) of the loop whose thread this is, for {@link
 * IdempotentRecordHandler}: a key whose attempts the dedup table counts as spent is not run again
 * ({@link SpentAttempts}). Only the loop knew they were spent when its dead letter could not be
 * written; after a restart or a rebalance the next loop would have run the handler once more for
 * each. The loop sets it on its thread, and the handler finds it there, whatever processors wrap
 * the handler (as {@link MarksInFlight}: a wrapper passes {@code process} on, but not a method it
 * does not know).
 */
final class LoopAttemptLimit {
  @SuppressWarnings("ThreadLocalUsage") // the limit of the loop running on each thread
  private static final ThreadLocal<@Nullable Integer> LIMIT = new ThreadLocal<>();

  private LoopAttemptLimit() {}

  /** Sets the limit of the loop about to run on this thread, until {@link #clearOnThisThread()}. */
  static void setOnThisThread(int maxAttempts) {
    LIMIT.set(maxAttempts);
  }

  static void clearOnThisThread() {
    LIMIT.remove();
  }

  /**
   * Under a loop, a claim beyond its limit: given back, and the exception to dead-letter the record
   * with instead of running the handler. Null for a claim within the limit, or outside a loop.
   */
  static @Nullable DedupAttemptsExhaustedException spent(
      DedupClaim claim, IdempotentExecutor executor) {
    Integer maxAttempts = LIMIT.get();
    return maxAttempts == null ? null : SpentAttempts.giveBack(claim, maxAttempts, executor);
  }
}
