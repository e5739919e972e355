package io.consumerdedup.core;

import io.consumerdedup.core.internal.FirstFailure;
import io.consumerdedup.core.internal.LeaseRenewer;
import java.util.ArrayList;
import java.util.List;
import org.jspecify.annotations.Nullable;

/**
 * The claims of a batch of deliveries, from {@link IdempotentExecutor#claimAll(List)}: one answer
 * per delivery, in the order given. The caller takes the answers in order with {@link #get(int)},
 * runs its handler for each held claim and ends it, and finally calls {@link #releaseUnended()} for
 * the claims it never got to (the records after one that failed, or a poll cut short).
 *
 * <p>Used by one thread at a time.
 */
public final class DedupClaims {
  private final IdempotentExecutor executor;
  private final ClaimCalls calls;
  private final List<IdempotentExecutor.Delivery> deliveries;

  /** Per delivery: a {@link DedupClaim}, the exception that refused it, or null if not claimed. */
  private final @Nullable Object[] answers;

  DedupClaims(
      IdempotentExecutor executor,
      ClaimCalls calls,
      List<IdempotentExecutor.Delivery> deliveries,
      @Nullable Object[] answers) {
    this.executor = executor;
    this.calls = calls;
    this.deliveries = deliveries;
    this.answers = answers;
  }

  /**
   * The answer to a delivery that the store refused (a duplicate, in progress elsewhere, a
   * conflicting payload), decided and told to the listener when the delivery is first asked for.
   */
  @FunctionalInterface
  interface Deferred {
    /** The delivery's claim, or the exception that refuses it. */
    Object answer();
  }

  /** The number of deliveries. */
  public int size() {
    return deliveries.size();
  }

  /**
   * The claim of delivery {@code index}: held (run the handler, then end it) or a duplicate (do not
   * run it). A later copy of a key that an earlier delivery of the batch holds is claimed now, when
   * asked, so that it sees how the earlier one ended: a duplicate once that one succeeded; so is a
   * key whose earlier SUCCESS in this process was still being written when the batch was claimed.
   *
   * @throws DedupInProgressException another consumer holds a live lease on the key
   * @throws DedupKeyConflictException the fingerprint differs from the stored one
   * @throws DedupStoreException an earlier outcome of the key is not written yet, or (for a key
   *     claimed now) the claim failed
   * @throws IllegalArgumentException the delivery's fingerprint is not usable
   */
  public DedupClaim get(int index) {
    Object answer = answers[index];
    if (answer instanceof Deferred deferred) {
      answer = deferred.answer();
      answers[index] = answer;
    } else if (answer == null) {
      IdempotentExecutor.Delivery delivery = deliveries.get(index);
      try {
        answer = executor.claim(delivery.key(), delivery.fingerprint(), delivery.source());
      } catch (RuntimeException e) {
        answer = e;
      }
      answers[index] = answer;
    }
    if (answer instanceof RuntimeException refused) {
      throw refused;
    }
    return (DedupClaim) answer;
  }

  /**
   * Gives back, in one store call, the held claims that were neither completed nor failed: the
   * handler never ran for them, so no attempt is counted, and the next delivery claims them as if
   * this batch had not. A claim left open because its handler ran but its outcome could not be
   * handed over (an {@code Error} at both tries) is ended with that outcome tried once more
   * instead, or, if that cannot be handed over either, its lease is left to run out, counting its
   * attempt. If the store cannot be reached, their leases run out instead, and a redelivery to this
   * process recognises them as its own before that.
   *
   * @throws IllegalStateException in mode {@link DedupMode#TRANSACTIONAL} with claims left open:
   *     they are SUCCESS in the caller's transaction, which must be rolled back instead
   */
  public void releaseUnended() {
    // Each claim regardless of the others, the first failure thrown at the end: stopped part-way
    // by an Error (an OutOfMemoryError), the claims after it, which the caller has dropped, went
    // on being renewed for the executor's life, their keys "in progress" for everyone.
    List<LeaseRenewer.Renewal> open = new ArrayList<>();
    Throwable first = null;
    for (Object answer : answers) {
      try {
        if (answer instanceof DedupClaim claim && claim.isOpen()) {
          if (claim.endUnhandedOutcome()) {
            continue; // its handler ran: not to be given back as if it had not
          }
          LeaseRenewer.Renewal released = claim.endForRelease();
          if (released == null) {
            throw new IllegalStateException(
                "The claim on "
                    + claim.key()
                    + " is SUCCESS in the caller's transaction but its handler did not run: roll"
                    + " the transaction back");
          }
          open.add(released);
        }
      } catch (RuntimeException | Error e) {
        first = FirstFailure.of(first, e);
      }
    }
    try {
      calls.releaseRenewed(open);
    } catch (RuntimeException | Error e) {
      first = FirstFailure.of(first, e);
    }
    if (first instanceof RuntimeException runtime) {
      throw runtime;
    }
    if (first != null) {
      throw (Error) first;
    }
  }
}
