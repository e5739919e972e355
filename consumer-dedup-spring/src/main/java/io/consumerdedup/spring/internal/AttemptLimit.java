package io.consumerdedup.spring.internal;

import io.consumerdedup.core.DedupAttemptsExhaustedException;
import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.Disposition;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.internal.FailureTexts;
import io.consumerdedup.core.internal.SpentAttempts;
import java.util.IntSummaryStatistics;
import java.util.List;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * How many times a failing listener runs for one key, counted in the dedup table ({@link
 * DedupRecord#attempts()}, one per claim) rather than by the error handler in memory, so that a
 * restart, a rebalance or another instance does not grant a failing record a fresh set of attempts;
 * and the log line of each failed attempt. In mode TRANSACTIONAL a failed attempt rolls its row
 * back, so the table cannot count it and only the error handler does.
 */
public final class AttemptLimit {
  private static final Logger log = LoggerFactory.getLogger(AttemptLimit.class);

  /**
   * Fails each claim whatever failing another threw: an {@code Error} (an {@code OutOfMemoryError})
   * that kept the first claim's FAILED from being handed over left the later ones unfailed, given
   * back at the batch's end as if the listener had never run, their attempts uncounted and their
   * records run again past the limit.
   */
  private static final EachRegardless.Step<List<DedupClaim>, Throwable> FAIL =
      (claims, error, i) -> claims.get(i).fail(error);

  private final int maxAttempts;

  /**
   * @throws IllegalArgumentException if {@code maxAttempts} is less than 1
   */
  public AttemptLimit(int maxAttempts) {
    if (maxAttempts < 1) {
      throw new IllegalArgumentException("maxAttempts must be at least 1, was " + maxAttempts);
    }
    this.maxAttempts = maxAttempts;
  }

  public int maxAttempts() {
    return maxAttempts;
  }

  /**
   * A claim of a key that already failed as often as allowed (its last failure's dead letter lost
   * in a crash, a recoverer that failed, a limit lowered since): gives the claim back without
   * counting an attempt and returns the exception to throw instead of running the listener, which
   * the error handler hands to its recoverer at once. Null for a claim within the limit.
   */
  public @Nullable DedupAttemptsExhaustedException beyondLimit(
      DedupClaim claim, IdempotentExecutor executor) {
    return SpentAttempts.giveBack(claim, maxAttempts, executor);
  }

  /**
   * What to throw to the container for the listener's {@code error} on {@code claim}'s attempt: the
   * error itself, or, on the last attempt allowed, a {@link DedupAttemptsExhaustedException} whose
   * cause it is, which the error handler does not retry. consumer-dedup's own exceptions (their
   * disposition says what to do) and {@link Error}s are passed on as they are.
   */
  public Throwable toThrow(DedupClaim claim, Throwable error) {
    if (claim.attempt() < maxAttempts
        || error instanceof Error
        || Disposition.of(error) != Disposition.HANDLER_FAILED) {
      return error;
    }
    // Described safely: a toString() that throws (a lazily loaded entity in the message) made the
    // container hear that exception instead, which its error handler retried as any other. The
    // cause, if it cannot describe itself, is a stand-in with its description and stack trace:
    // spring-kafka's DeadLetterPublishingRecoverer prints the stack trace, causes included, and
    // what that threw failed every recovery until a later delivery found the attempts spent.
    return new DedupAttemptsExhaustedException(
        claim.key(),
        claim.attempt(),
        maxAttempts,
        FailureTexts.describe(error),
        claim.source(),
        FailureTexts.loggable(error));
  }

  /**
   * Ends {@code claim} after the listener threw {@code error} ({@link DedupClaim#failOrRelease}):
   * FAILED, logged as a failed attempt ({@link #logFailure}), or, for an exception that waiting can
   * cure (a called {@code @Idempotent} method's key held by another consumer, the database
   * unreachable), given back uncounted: the error handler holds the record and logs that, naming
   * the exception, and a WARN here saying an attempt failed would be false. Logged after the claim
   * is ended: an {@code Error} out of a log appender (an {@code OutOfMemoryError}, a {@code
   * StackOverflowError}) must not keep the failure from being written, or the claim, given back
   * instead or left PROCESSING, would not count the attempt, and a record that always fails would
   * be run again and again, never given up.
   */
  public void listenerThrew(DedupClaim claim, Throwable error) {
    boolean released = false;
    try {
      released = claim.failOrRelease(error);
    } finally {
      if (released) {
        logRelease(claim.key(), error);
      } else {
        logFailure(claim, error);
      }
    }
  }

  /**
   * Ends {@code claims} after a batch listener threw {@code error} without naming a record, as
   * {@link #listenerThrew} ends one ({@link DedupClaim#failOrReleaseAll}), the failure logged in
   * one line for several ({@link #logBatchFailure}).
   */
  public void listenerThrewAll(List<DedupClaim> claims, Throwable error) {
    boolean released = false;
    try {
      released = DedupClaim.failOrReleaseAll(claims, error);
    } finally {
      if (claims.isEmpty()) {
        // nothing was ended
      } else if (released) {
        logRelease(claims.get(0).key(), error);
      } else if (claims.size() == 1) {
        logFailure(claims.get(0), error);
      } else {
        logBatchFailure(claims, error);
      }
    }
  }

  private static void logRelease(DedupKey key, Throwable error) {
    if (log.isDebugEnabled()) {
      log.debug(
          "The listener of {} threw a retry-later exception; its claim is given back uncounted: {}",
          key,
          FailureTexts.describe(error));
    }
  }

  /**
   * Records FAILED for {@code claims}, a batch listener having failed with {@code error} without
   * naming a record, logged in one line for several ({@link #logBatchFailure}); written whatever
   * the logging throws, as in {@link #fail}.
   */
  public void failAll(List<DedupClaim> claims, Throwable error) {
    try {
      if (claims.size() == 1) {
        logFailure(claims.get(0), error);
      } else if (!claims.isEmpty()) {
        logBatchFailure(claims, error);
      }
    } finally {
      EachRegardless.run(claims, error, 0, claims.size(), FAIL);
    }
  }

  /**
   * One WARN line for a failed attempt: where the record came from, its key, the attempt and the
   * cause's class and message; the stack trace at DEBUG (it is logged at ERROR when the record is
   * given up). An error that cannot describe itself is described safely: Logback reads the message
   * of the line's exception, and what that threw came out of this call, before the claim was failed
   * (left PROCESSING under a renewed lease, every delivery of its key refused as in progress).
   */
  public void logFailure(DedupClaim claim, Throwable error) {
    int attempt = claim.attempt();
    log.warn(
        "Handler failed for {}, key {}, attempt {} of {}: {}{}",
        claim.source(),
        claim.key(),
        attempt,
        maxAttempts,
        FailureTexts.describe(error),
        attempt >= maxAttempts ? "; no attempts left, so it is not run again" : "");
    if (log.isDebugEnabled()) {
      log.debug(
          "Stack trace of the failed attempt of {}", claim.key(), FailureTexts.loggable(error));
    }
  }

  /**
   * One WARN line for a batch listener call that failed without naming the record it failed at:
   * every claim of the batch failed one attempt. Described safely, as in {@link #logFailure}.
   */
  public void logBatchFailure(List<DedupClaim> claims, Throwable error) {
    DedupClaim first = claims.get(0);
    DedupClaim last = claims.get(claims.size() - 1);
    IntSummaryStatistics attempt =
        claims.stream().mapToInt(DedupClaim::attempt).summaryStatistics();
    log.warn(
        "Handler failed for the {} records of a batch, {} to {}, keys {} to {}, attempt {} of {}:"
            + " {}{}",
        claims.size(),
        first.source(),
        last.source(),
        first.key(),
        last.key(),
        attempt.getMin() == attempt.getMax()
            ? String.valueOf(attempt.getMax())
            : attempt.getMin() + " to " + attempt.getMax(),
        maxAttempts,
        FailureTexts.describe(error),
        attempt.getMax() >= maxAttempts
            ? "; the records with no attempts left are given up at their next delivery"
            : "");
    if (log.isDebugEnabled()) {
      log.debug(
          "Stack trace of the failed batch from {}", first.key(), FailureTexts.loggable(error));
    }
  }
}
