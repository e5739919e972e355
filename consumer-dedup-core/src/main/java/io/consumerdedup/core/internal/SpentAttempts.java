package io.consumerdedup.core.internal;

import io.consumerdedup.core.DedupAttemptsExhaustedException;
import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.IdempotentExecutor;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The rule every adapter applies to a claim before it runs the handler: a key whose handler already
 * failed as often as the adapter allows, counted in the dedup table ({@link DedupClaim#attempt()},
 * one per claim), is not run again, whatever delivery brings it (a restart, a rebalance, another
 * consumer, a dead letter lost in a crash or not written), since only the adapter's memory knew
 * that its attempts were spent.
 */
public final class SpentAttempts {
  private static final Logger log = LoggerFactory.getLogger(SpentAttempts.class);

  private SpentAttempts() {}

  /**
   * A claim beyond {@code maxAttempts}: gives the claim back without counting an attempt (so the
   * key is not left PROCESSING) and returns the exception to dead-letter the record with instead of
   * running the handler. Null for a duplicate or a claim within the limit.
   */
  public static @Nullable DedupAttemptsExhaustedException giveBack(
      DedupClaim claim, int maxAttempts, IdempotentExecutor executor) {
    if (claim.isDuplicate() || claim.attempt() <= maxAttempts) {
      return null;
    }
    if (executor.mode() == DedupMode.SEPARATE) {
      claim.release();
    } // else the claim is part of the caller's transaction, which this exception rolls back
    int failed = claim.attempt() - 1;
    return new DedupAttemptsExhaustedException(
        claim.key(), failed, maxAttempts, lastError(claim, executor), claim.source(), null);
  }

  private static @Nullable String lastError(DedupClaim claim, IdempotentExecutor executor) {
    try {
      return executor
          .store()
          .find(claim.key())
          .flatMap(DedupRecord::lastError)
          .map(TakeoverNote::handlerError)
          .orElse(null);
    } catch (RuntimeException e) {
      // Only the message loses it: the record is given up either way.
      log.debug("Could not read the last error of {}", claim.key(), e);
      return null;
    }
  }
}
