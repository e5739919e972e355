package io.consumerdedup.core;

import io.consumerdedup.core.internal.AfterCommit;
import io.consumerdedup.core.internal.CrossGroupDuplicates;
import io.consumerdedup.core.internal.DeliverySources;
import io.consumerdedup.core.internal.FaultPoints;
import io.consumerdedup.core.internal.LeaseRenewer;
import io.consumerdedup.core.internal.Outcomes;
import io.consumerdedup.core.internal.RecentClaims;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What the store's answer to a claim becomes for the delivery, in {@link IdempotentExecutor#claim}
 * and {@link IdempotentExecutor#claimAll}: a held claim the caller ends, a duplicate, or a
 * conflicting payload; nothing yet for a key in progress elsewhere, which the caller waits for or
 * refuses.
 */
final class ClaimAnswers {
  // The engine's events are told under the executor's logger, wherever they are decided.
  private static final Logger log = LoggerFactory.getLogger(IdempotentExecutor.class);

  private final DedupListener listener;
  private final ConflictPolicy conflictPolicy;
  private final Outcomes outcomes;
  private final ClaimCalls calls;
  private final RecentClaims recentClaims;
  private final CrossGroupDuplicates crossGroupDuplicates = new CrossGroupDuplicates();

  ClaimAnswers(
      DedupListener listener,
      ConflictPolicy conflictPolicy,
      Outcomes outcomes,
      ClaimCalls calls,
      RecentClaims recentClaims) {
    this.listener = listener;
    this.conflictPolicy = conflictPolicy;
    this.outcomes = outcomes;
    this.calls = calls;
    this.recentClaims = recentClaims;
  }

  /**
   * Tells a claim's news now; for a claim in the caller's transaction, as {@link
   * AfterCommit#tellOfTry} says: held while the try it is part of may be run again. A claim of an
   * executor in mode SEPARATE commits on its own, and its news is told whatever the caller's
   * transaction does.
   */
  private void tellOfTry(Runnable news) {
    if (calls.inTransaction()) {
      AfterCommit.tellOfTry(news);
    } else {
      news.run();
    }
  }

  /**
   * The answer to a key that was not claimed because it is done or claimed with another payload;
   * null if it is in progress elsewhere, or of a status this version does not know.
   */
  @Nullable DedupClaim duplicateOrConflict(
      DedupKey key, @Nullable String fingerprint, @Nullable String source, DedupRecord existing) {
    if (existing.status() == DedupStatus.UNKNOWN) {
      // Whether the key is done, or its payload a conflict, is the newer version's to say: held,
      // neither handled nor dead-lettered, until that version or an operator settles it.
      return null;
    }
    String stored = existing.fingerprint().orElse(null);
    if (fingerprint != null && stored != null && !stored.equals(fingerprint)) {
      tellOfTry(() -> listener.conflict(key, existing));
      // Only an action that succeeded can answer for a delivery; one in progress may still fail.
      if (conflictPolicy == ConflictPolicy.TREAT_AS_DUPLICATE) {
        if (existing.status() == DedupStatus.SUCCESS) {
          return DedupClaim.duplicate(key, existing.attempts());
        }
        if (existing.isLeaseLive()) {
          return null;
        }
      }
      throw new DedupKeyConflictException(key, stored, fingerprint, source);
    }
    if (existing.status() == DedupStatus.SUCCESS) {
      crossGroupDuplicates.duplicate(key, source, existing);
      if (log.isDebugEnabled()) { // a duplicate is a read: its log line should not cost more
        log.debug("Skipping duplicate {}: {}", DeliverySources.where(key, source), existing);
      }
      tellOfTry(() -> listener.duplicate(key, existing));
      return DedupClaim.duplicate(key, existing.attempts());
    }
    return null;
  }

  /**
   * The refusal of a key that {@link #duplicateOrConflict} left unanswered: in progress elsewhere,
   * or of a status a newer version wrote, which is held the same way and said at WARN, since only
   * that version or an operator moves it on.
   */
  DedupInProgressException inProgress(DedupKey key, DedupRecord existing, @Nullable String source) {
    if (existing.status() == DedupStatus.UNKNOWN) {
      log.warn(
          "Holding {}: its record has the status '{}', which this version of consumer-dedup does"
              + " not know (a newer version sharing the table wrote it, as in a rolling upgrade);"
              + " not handled and not dead-lettered, tried again later: {}",
          DeliverySources.where(key, source),
          existing.storedStatus(),
          existing);
    }
    tellOfTry(() -> listener.inProgress(key, existing));
    return new DedupInProgressException(key, existing, source);
  }

  /**
   * @param renewal the claim's lease renewal; null for a claim in the caller's transaction, which
   *     holds the key until it ends
   */
  DedupClaim started(
      ClaimResult.Claimed claim, @Nullable String source, LeaseRenewer.@Nullable Renewal renewal) {
    DedupKey key = claim.key();
    int attempt = claim.token();
    if (attempt > 1) {
      log.info(
          "Claimed {} for attempt {} (retry after failure or expired lease)",
          DeliverySources.where(key, source),
          attempt);
    }
    // In the caller's transaction a rolled-back claim leaves no record: a new one is expected.
    int heldBefore = renewal == null ? 0 : recentClaims.claimed(key, attempt);
    if (attempt == 1 && heldBefore > 0) {
      log.warn(
          "Claimed {} as a new key (attempt 1), though this process held attempt {} of it"
              + " lately: its record vanished (a failover to a standby that had not received it,"
              + " a DELETE, a purge), and its handler runs again",
          DeliverySources.where(key, source),
          heldBefore);
    }
    tellOfTry(() -> listener.claimed(key, attempt));
    FaultPoints.reached(FaultPoints.Point.AFTER_CLAIM);
    if (renewal == null) {
      return DedupClaim.inTransaction(claim, source, listener, calls);
    }
    return DedupClaim.leased(key, attempt, source, outcomes, renewal, listener, calls);
  }
}
