package io.consumerdedup.core;

import io.consumerdedup.core.internal.FirstFailure;
import io.consumerdedup.core.internal.LeaseRenewer;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Set;
import java.util.concurrent.RejectedExecutionException;
import org.jspecify.annotations.Nullable;

/**
 * The bookkeeping of {@link IdempotentExecutor#claimAll(List)}: which deliveries of a batch go to
 * the store in its one round trip (the first copy of each key that was not refused before), and
 * which answer each delivery gets, as {@link ClaimAnswers} answers a single claim.
 */
final class BatchClaims {
  private final IdempotentExecutor executor;
  private final ClaimCalls calls;
  private final ClaimAnswers claimAnswers;
  private final LeaseRenewer renewer;

  BatchClaims(
      IdempotentExecutor executor,
      ClaimCalls calls,
      ClaimAnswers claimAnswers,
      LeaseRenewer renewer) {
    this.executor = executor;
    this.calls = calls;
    this.claimAnswers = claimAnswers;
    this.renewer = renewer;
  }

  DedupClaims claimAll(List<IdempotentExecutor.Delivery> deliveries, boolean tellStoreFailure) {
    boolean inTransaction = executor.mode() == DedupMode.TRANSACTIONAL;
    @Nullable Object[] answers = new Object[deliveries.size()];
    Set<DedupKey> keys = new HashSet<>();
    List<ClaimRequest> requests = new ArrayList<>();
    List<Integer> requested = new ArrayList<>();
    long takenNanos = System.nanoTime();
    try {
      takeClaimIds(deliveries, keys, requests, requested, answers);
    } catch (RuntimeException | Error e) {
      // Such as an OutOfMemoryError, or an Error from the caller's list built as it is read: the
      // claim ids taken so far were never sent. Dropped, the next poll of their records sent fresh
      // ids and was told "in progress" by this process's own unanswered claims, for a whole lease.
      calls.unsent(requests, takenNanos);
      throw e;
    }
    long sentNanos = System.nanoTime();
    List<ClaimResult> results = calls.claimAll(requests, sentNanos, tellStoreFailure);
    List<ClaimResult.Claimed> held = null;
    List<LeaseRenewer.Renewal> started = null;
    // Everything from here on inside the try: the claims have committed, and an Error (an
    // OutOfMemoryError) that escaped before their answers were handed back left them neither given
    // back nor remembered, their renewals (once started) going on for the executor's life.
    try {
      // The executor may have closed while the claims were on their way, and its closed renewer
      // refuses them; they must be given back then too, not left blocking their keys for a whole
      // lease that nobody renews.
      held = held(results);
      started = inTransaction ? null : renewer.startAll(held, sentNanos);
      Iterator<LeaseRenewer.Renewal> renewals = started == null ? null : started.iterator();
      for (int j = 0; j < results.size(); j++) {
        int i = requested.get(j);
        answers[i] = answer(deliveries.get(i), results.get(j), renewals);
      }
      // A caller's list built as it is read may throw here.
      return new DedupClaims(executor, calls, List.copyOf(deliveries), answers);
    } catch (RuntimeException | Error e) {
      // Nobody gets these claims (an Error, an OutOfMemoryError say, while they were answered):
      // given back, not left held under leases renewed for as long as the executor runs.
      if (!inTransaction) {
        if (started != null) {
          started.forEach(LeaseRenewer.Renewal::stop);
        }
        try {
          // Read again only if the Error struck as it was first read.
          calls.release(held != null ? held : held(results), sentNanos);
        } catch (RuntimeException | Error releaseFailed) {
          // The release may throw the very Error that struck (the JVM's one preallocated
          // OutOfMemoryError): added to itself, it was replaced by "Self-suppression not
          // permitted", an IllegalArgumentException, and the caller never heard of the Error.
          FirstFailure.of(e, releaseFailed);
        }
      }
      if (e instanceof RejectedExecutionException && !inTransaction && started == null) {
        // The renewer refused the claims: only a closed one does.
        throw new DedupExecutorClosedException(
            "IdempotentExecutor " + executor.ownerId() + " closed while the batch was claimed",
            null,
            null,
            e);
      }
      throw e;
    }
  }

  private static List<ClaimResult.Claimed> held(List<ClaimResult> results) {
    return results.stream()
        .filter(ClaimResult.Claimed.class::isInstance)
        .map(ClaimResult.Claimed.class::cast)
        .toList();
  }

  /**
   * Takes a claim id for each delivery of the batch that goes to the store ({@code requests}, at
   * {@code requested} in {@code deliveries}); a delivery refused at once gets its answer.
   */
  private void takeClaimIds(
      List<IdempotentExecutor.Delivery> deliveries,
      Set<DedupKey> keys,
      List<ClaimRequest> requests,
      List<Integer> requested,
      @Nullable Object[] answers) {
    for (int i = 0; i < deliveries.size(); i++) {
      IdempotentExecutor.Delivery delivery = deliveries.get(i);
      if (!keys.add(delivery.key())) {
        continue; // a later copy: claimed when asked, once the earlier one has ended
      }
      if (calls.outcomePending(delivery.key())) {
        // The SUCCESS of an earlier delivery is on its way (the last poll's, in flight while this
        // poll is claimed): claimed when asked, once it is written, rather than written here
        // again, on the batch's time and against the writer's lock on the row.
        continue;
      }
      try {
        requests.add(calls.request(delivery.key(), delivery.fingerprint(), delivery.source()));
        requested.add(i);
      } catch (RuntimeException e) {
        answers[i] = e;
      }
    }
  }

  /**
   * The answer to {@code delivery}: its claim, or, once it is asked for, the duplicate or the
   * exception that refused it (in progress elsewhere, whatever the {@link InProgressPolicy}, or a
   * conflicting payload).
   */
  private Object answer(
      IdempotentExecutor.Delivery delivery,
      ClaimResult result,
      @Nullable Iterator<LeaseRenewer.Renewal> renewals) {
    if (result instanceof ClaimResult.Claimed claimed) {
      return claimAnswers.started(
          claimed, delivery.source(), renewals == null ? null : renewals.next());
    }
    DedupRecord existing = ((ClaimResult.Taken) result).existing();
    // Told to the listener when the delivery is reached, not now: a poll cut short (held back at
    // an earlier record, stopped by an Error) claims the records it did not reach again in the
    // next poll, and the application's metrics counted their duplicates and "in progress" once
    // per poll that claimed them, though each was handled once.
    return (DedupClaims.Deferred) () -> refusedOrDuplicate(delivery, existing);
  }

  private Object refusedOrDuplicate(IdempotentExecutor.Delivery delivery, DedupRecord existing) {
    try {
      DedupClaim done =
          claimAnswers.duplicateOrConflict(
              delivery.key(), delivery.fingerprint(), delivery.source(), existing);
      if (done != null) {
        return done;
      }
    } catch (DedupKeyConflictException e) {
      return e;
    }
    return claimAnswers.inProgress(delivery.key(), existing, delivery.source());
  }
}
