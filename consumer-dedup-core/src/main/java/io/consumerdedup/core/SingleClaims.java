package io.consumerdedup.core;

import io.consumerdedup.core.internal.Durations;
import io.consumerdedup.core.internal.LeaseRenewer;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.TimeUnit;
import org.jspecify.annotations.Nullable;

/**
 * The steps of {@link IdempotentExecutor#claim}: one delivery's claim sent, its answer turned into
 * a held claim, a duplicate or a conflict, and another consumer's live lease waited out under
 * {@link InProgressPolicy#WAIT}, as {@link BatchClaims} does for a batch.
 */
final class SingleClaims {
  private static final Duration FIRST_WAIT_BACKOFF = Duration.ofMillis(50);
  private static final Duration LONGEST_WAIT_BACKOFF = Duration.ofSeconds(1);

  private final ClaimCalls calls;
  private final ClaimAnswers answers;
  private final LeaseRenewer renewer;
  private final boolean inTransaction;
  private final InProgressPolicy inProgressPolicy;
  private final Duration waitTimeout;

  SingleClaims(
      ClaimCalls calls,
      ClaimAnswers answers,
      LeaseRenewer renewer,
      DedupMode mode,
      InProgressPolicy inProgressPolicy,
      Duration waitTimeout) {
    this.calls = calls;
    this.answers = answers;
    this.renewer = renewer;
    this.inTransaction = mode == DedupMode.TRANSACTIONAL;
    this.inProgressPolicy = inProgressPolicy;
    this.waitTimeout = waitTimeout;
  }

  DedupClaim claim(DedupKey key, @Nullable String fingerprint, @Nullable String source) {
    ClaimRequest request = calls.request(key, fingerprint, source);
    long waitDeadline = System.nanoTime() + waitTimeout.toNanos();
    Duration backoff = FIRST_WAIT_BACKOFF;
    while (true) {
      long sentNanos = System.nanoTime();
      ClaimResult claim = calls.claim(request, sentNanos);
      if (claim instanceof ClaimResult.Claimed claimed) {
        LeaseRenewer.Renewal renewal = null;
        try {
          // Inside the try: the executor may have closed while the claim was on its way, and
          // its closed renewer refuses it; it must be given back then too.
          renewal = inTransaction ? null : renewer.start(claimed, sentNanos);
          return answers.started(claimed, source, renewal);
        } catch (RuntimeException | Error e) {
          // Nobody gets the claim: given back, not left held under a lease renewed for as long
          // as the executor runs.
          if (!inTransaction) {
            if (renewal != null) {
              renewal.stop();
            }
            try {
              calls.release(List.of(claimed), sentNanos);
            } catch (RuntimeException | Error releaseFailed) {
              e.addSuppressed(releaseFailed);
            }
          }
          if (e instanceof RejectedExecutionException && !inTransaction && renewal == null) {
            // The renewer refused the claim: only a closed one does.
            throw new DedupExecutorClosedException(
                "The executor closed while the key was claimed", key, source, e);
          }
          throw e;
        }
      }
      DedupRecord existing = ((ClaimResult.Taken) claim).existing();
      DedupClaim done = answers.duplicateOrConflict(key, fingerprint, source, existing);
      if (done != null) {
        return done;
      }
      long remaining = waitDeadline - System.nanoTime();
      // In a transaction there is nothing to wait for: only a separate-mode holder (mixed modes
      // on one key) can be in progress, and waiting would hold the caller's transaction open.
      // Nor for a status a newer version wrote: no lease of this version's ends it.
      if (inProgressPolicy == InProgressPolicy.THROW
          || inTransaction
          || remaining <= 0
          || existing.status() == DedupStatus.UNKNOWN) {
        // Reported once per delivery that gives up, however long it waited.
        throw answers.inProgress(key, existing, source);
      }
      sleep(Math.min(backoff.toNanos(), remaining), key, existing, source);
      backoff = Durations.doubling(backoff, LONGEST_WAIT_BACKOFF, 2);
    }
  }

  private static void sleep(
      long nanos, DedupKey key, DedupRecord existing, @Nullable String source) {
    try {
      TimeUnit.NANOSECONDS.sleep(nanos);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      DedupInProgressException inProgress = new DedupInProgressException(key, existing, source);
      inProgress.addSuppressed(e);
      throw inProgress;
    }
  }
}
