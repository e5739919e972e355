package io.consumerdedup.core;

import io.consumerdedup.core.internal.FaultPoints;
import io.consumerdedup.core.internal.LeaseRenewer;
import io.consumerdedup.core.internal.Outcomes;
import io.consumerdedup.core.internal.PendingOutcome;
import io.consumerdedup.core.internal.RecentClaims;
import io.consumerdedup.core.internal.UnansweredClaims;
import java.time.Duration;
import java.util.List;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The executor's claim and release calls to the store, and the claims among them whose answer never
 * arrived. A claim is sent only once the key's earlier outcome in this process is written; each
 * call is timed and its failure reported to the listener. When the store gives up on a claim while
 * the database is unreachable, the claim may have committed all the same, leaving the key under a
 * live lease of ours: its claim id is kept ({@link UnansweredClaims}) and sent again with the key's
 * next claim from this process, so that the store recognises the row as ours instead of as another
 * holder's lease that would block the key until it runs out.
 */
final class ClaimCalls {
  // What goes wrong here is told as the executor's own doing, under its logger.
  private static final Logger log = LoggerFactory.getLogger(IdempotentExecutor.class);

  private final DedupStore store;
  private final DedupListener listener;
  private final Outcomes outcomes;
  private final String ownerId;
  private final Duration lease;
  private final boolean inTransaction;
  private final Duration successRetention;
  private final Duration claimRetention;
  private final RecentClaims recentClaims;
  private final UnansweredClaims unanswered;

  ClaimCalls(
      DedupStore store,
      DedupListener listener,
      Outcomes outcomes,
      String ownerId,
      Duration lease,
      DedupMode mode,
      Duration successRetention,
      Duration failedRetention,
      RecentClaims recentClaims) {
    this.store = store;
    this.listener = listener;
    this.outcomes = outcomes;
    this.ownerId = ownerId;
    this.lease = lease;
    this.inTransaction = mode == DedupMode.TRANSACTIONAL;
    this.successRetention = successRetention;
    // In the caller's transaction the record is written as SUCCESS at once and kept as such.
    this.claimRetention = inTransaction ? successRetention : failedRetention;
    this.recentClaims = recentClaims;
    this.unanswered = new UnansweredClaims(lease);
  }

  /**
   * The request for a claim of {@code key}: with the id of its unanswered claim, if it has one.
   *
   * @throws IllegalArgumentException the fingerprint is not usable
   * @throws DedupStoreUnavailableException the outcome of an earlier attempt of the key in this
   *     process is still not written
   */
  ClaimRequest request(DedupKey key, @Nullable String fingerprint, @Nullable String source) {
    checkFingerprint(fingerprint);
    if (!inTransaction) {
      settlePending(key, source);
    }
    return new ClaimRequest(
        key, ownerId, lease, claimRetention, fingerprint, source, unanswered.takeClaimIdFor(key));
  }

  /** The owner id this executor writes on its claims. */
  String ownerId() {
    return ownerId;
  }

  /** Whether claims are made in the caller's transaction (mode TRANSACTIONAL). */
  boolean inTransaction() {
    return inTransaction;
  }

  private static void checkFingerprint(@Nullable String fingerprint) {
    if (fingerprint == null) {
      return;
    }
    if (fingerprint.isEmpty() || fingerprint.length() > 64) {
      throw new IllegalArgumentException(
          "fingerprint must be 1 to 64 characters, was " + fingerprint.length());
    }
    if (fingerprint.chars().anyMatch(Character::isISOControl)) {
      throw new IllegalArgumentException("fingerprint must not contain control characters");
    }
  }

  private void settlePending(DedupKey key, @Nullable String source) {
    try {
      outcomes.settlePending(key, source);
    } catch (DedupStoreException e) {
      tellStoreFailed(key, e);
      throw e;
    }
  }

  /**
   * Tells the listener that the store failed; what the listener throws is added to {@code error} as
   * suppressed. An Error (which the composite listener does not catch) escaping here replaced the
   * store's exception, which says "retry later": a container stopped on it instead, and a poll's
   * give-back of unused claims, which must not throw, threw.
   */
  private void tellStoreFailed(DedupKey key, DedupStoreException error) {
    try {
      listener.storeFailed(key, error);
    } catch (RuntimeException | Error e) {
      error.addSuppressed(e);
    }
  }

  /**
   * Whether an outcome of {@code key} from this process is still on its way to the store: a claim
   * of the key would have to write it first ({@link #request}).
   */
  boolean outcomePending(DedupKey key) {
    return !inTransaction && outcomes.isPending(key);
  }

  /**
   * Sends {@code request}, at {@code sentNanos}. The SUCCESS mark that this thread left for its
   * next claim ({@link Outcomes#completeWithNextClaim}) goes with it, in the same commit.
   */
  ClaimResult claim(ClaimRequest request, long sentNanos) {
    FaultPoints.reached(FaultPoints.Point.BEFORE_CLAIM);
    PendingOutcome mark = inTransaction ? null : outcomes.takeParked(request.key());
    boolean timed = false;
    try {
      ClaimResult result;
      if (inTransaction) {
        result = store.claimInTransaction(request);
      } else if (mark == null) {
        result = store.claim(request);
      } else {
        FaultPoints.reached(FaultPoints.Point.BEFORE_SUCCESS_MARK);
        DedupStore.ClaimCompleting done =
            store.claimCompleting(request, List.of(mark.claim()), successRetention);
        PendingOutcome written = mark;
        mark = null; // answered: what follows cannot make it unwritten
        outcomes.writtenWithClaim(written, !done.leaseLost().contains(written.claim().key()));
        FaultPoints.reached(FaultPoints.Point.AFTER_SUCCESS_MARK);
        result = done.claim();
      }
      // Inside the try: the claim has committed, and an Error the application's listener throws
      // here (which the composite one lets through) must leave its claim id remembered, as one
      // thrown while the answer was read. Told from a finally, the Error left the key PROCESSING
      // under a lease nobody renewed, and the next delivery here "in progress" for a whole lease.
      timed = true;
      listener.claimTimed(request.key(), Duration.ofNanos(System.nanoTime() - sentNanos));
      return result;
    } catch (DedupStoreException e) {
      if (mark != null) {
        outcomes.notWrittenWithClaim(mark, e);
      }
      // Whatever the store says: the claim may have committed before the connection failed, and
      // the id may be that of an earlier unanswered claim (taken for this one). Dropped on an
      // error that is not "unavailable" (a standby still read-only after a failover), the next
      // delivery sent a fresh id and was told "in progress" by this process's own claim for a
      // whole lease. Sent again, it names only this process's own claim.
      unanswered.unanswered(request.key(), request.claimId(), sentNanos);
      tellStoreFailed(request.key(), e);
      throw e.locatedAt(request.source());
    } catch (RuntimeException | Error e) {
      // Such as an OutOfMemoryError while the answer was read, or the application's listener
      // throwing as the carried mark was settled: the claim may have committed all the same, and
      // like a claim whose answer the network lost it must not block its key for a whole lease.
      unanswered.unanswered(request.key(), request.claimId(), sentNanos);
      if (mark != null) {
        // Whatever went wrong, the mark is not dropped: kept and written in the background.
        outcomes.notWrittenWithClaim(
            mark, e instanceof RuntimeException runtime ? runtime : new IllegalStateException(e));
      }
      throw e;
    } finally {
      if (!timed) {
        listener.claimTimed(request.key(), Duration.ofNanos(System.nanoTime() - sentNanos));
      }
    }
  }

  /**
   * {@code requests}, taken at {@code takenNanos}, were never sent: the claim ids they took from
   * the unanswered claims are remembered again, for the next claim of their keys. A fresh id put
   * back with them matches no row, and is sent as any fresh one.
   */
  void unsent(List<ClaimRequest> requests, long takenNanos) {
    requests.forEach(request -> unanswered.unsent(request.key(), request.claimId(), takenNanos));
  }

  /**
   * Sends {@code requests} in one round trip, at {@code sentNanos}; answers in their order. A store
   * failure is told to the listener if {@code tellStoreFailure}.
   */
  List<ClaimResult> claimAll(
      List<ClaimRequest> requests, long sentNanos, boolean tellStoreFailure) {
    if (requests.isEmpty()) {
      return List.of();
    }
    DedupKey first = requests.get(0).key();
    boolean timed = false;
    try {
      // Inside the try: what is thrown here leaves the ids taken for the requests remembered.
      FaultPoints.reached(FaultPoints.Point.BEFORE_CLAIM);
      List<ClaimResult> results =
          inTransaction ? store.claimAllInTransaction(requests) : store.claimAll(requests);
      // Inside the try too: the claims have committed (see claim).
      timed = true;
      listener.claimTimed(first, Duration.ofNanos(System.nanoTime() - sentNanos));
      return results;
    } catch (DedupStoreException e) {
      // Whatever the store says, as for a single claim (see claim).
      requests.forEach(
          request -> unanswered.unanswered(request.key(), request.claimId(), sentNanos));
      if (tellStoreFailure) {
        tellStoreFailed(first, e);
      }
      throw e;
    } catch (RuntimeException | Error e) {
      // The claims may have committed before the answer was lost (see claim).
      requests.forEach(
          request -> unanswered.unanswered(request.key(), request.claimId(), sentNanos));
      throw e;
    } finally {
      if (!timed) {
        listener.claimTimed(first, Duration.ofNanos(System.nanoTime() - sentNanos));
      }
    }
  }

  /**
   * Refuses a claim made in the caller's transaction whose record that transaction no longer holds,
   * once its handler has returned (see {@link DedupStore#heldInTransaction}).
   *
   * @throws IllegalStateException the database rolled the transaction back under the handler
   */
  void requireHeldInTransaction(ClaimResult.Claimed claim) {
    if (!store.heldInTransaction(claim)) {
      throw new IllegalStateException(
          "The database rolled back the transaction of the claim on "
              + claim.key()
              + " while its handler ran (a deadlock, whose exception the handler caught and went"
              + " on): its dedup record and the writes before that statement are gone, and what"
              + " the handler wrote after it is in a new transaction. Roll the transaction back;"
              + " let the statement's failure end the handler");
    }
  }

  /**
   * Marks FAILED, in the caller's transaction, a claim made in it whose handler threw {@code
   * error}; what goes wrong is added to {@code error} as suppressed, since the handler's failure is
   * what the caller must hear (on PostgreSQL a failed statement of the handler has aborted the
   * transaction, and this statement fails too; on MySQL/MariaDB a deadlock the handler caught has
   * rolled it back, the claim's row with it, and the caller hears it must not commit).
   */
  void failInTransaction(ClaimResult.Claimed claim, Throwable error) {
    try {
      if (!store.failInTransaction(claim, Outcomes.describe(error))) {
        // No row to mark: InnoDB may have rolled the transaction back under the handler (a
        // deadlock it caught before it threw), and a caller that commits on this failure (a
        // checked one, which @Transactional commits) would commit the handler's later writes
        // alone, with no dedup row, and the retry would apply them again.
        requireHeldInTransaction(claim);
      }
    } catch (RuntimeException e) {
      if (e != error) {
        error.addSuppressed(e);
      }
    }
  }

  /**
   * Releases claims whose handler never ran (see {@link DedupClaims#releaseUnended()}) just after
   * they were claimed at {@code claimSentNanos}; if the store cannot be reached, a redelivery here
   * recognises them by their claim ids until their leases run out.
   */
  void release(List<ClaimResult.Claimed> claims, long claimSentNanos) {
    release(claims, claims.stream().map(claim -> claimSentNanos).toList());
  }

  /**
   * Releases held claims whose handler never ran, or threw an exception that waiting can help
   * ({@link DedupClaim#failOrRelease}), as {@link #release(List, long)}, each remembered from its
   * latest renewal if the store cannot be reached: their leases were renewed while they waited (the
   * records before them in a poll), and remembered from the claim, one held for longer than a lease
   * was forgotten at once, its redelivery to this process told "in progress" by its own claim until
   * the lease renewed last ran out.
   */
  void releaseRenewed(List<LeaseRenewer.Renewal> renewals) {
    release(
        renewals.stream().map(LeaseRenewer.Renewal::claim).toList(),
        renewals.stream().map(LeaseRenewer.Renewal::heldFromNanos).toList());
  }

  private void release(List<ClaimResult.Claimed> claims, List<Long> heldFromNanos) {
    if (claims.isEmpty()) {
      return;
    }
    claims.forEach(claim -> recentClaims.released(claim.key()));
    try {
      store.releaseAll(claims);
    } catch (DedupStoreException e) {
      remember(claims, heldFromNanos);
      tellStoreFailed(claims.get(0).key(), e);
      log.warn(
          "Could not release the claims on {}, given back uncounted (their handlers did not run,"
              + " or were held back); their leases run out instead, and a redelivery to this"
              + " process takes them up: {}",
          claims.stream().map(ClaimResult.Claimed::key).toList(),
          e.getMessage());
    } catch (RuntimeException | Error e) {
      // Such as an OutOfMemoryError from getConnection: the claims are still held, and the
      // redelivery to this process must take them up as after a release the database refused,
      // not be told "in progress" by its own claims for a whole lease.
      remember(claims, heldFromNanos);
      throw e;
    }
  }

  private void remember(List<ClaimResult.Claimed> claims, List<Long> heldFromNanos) {
    for (int i = 0; i < claims.size(); i++) {
      ClaimResult.Claimed claim = claims.get(i);
      unanswered.unanswered(claim.key(), claim.claimId(), heldFromNanos.get(i));
    }
  }
}
