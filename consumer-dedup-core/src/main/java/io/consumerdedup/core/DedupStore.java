package io.consumerdedup.core;

import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import java.util.Set;

/**
 * Where claims are recorded: the service provider interface behind {@link IdempotentExecutor}. The
 * PostgreSQL implementation is {@code io.consumerdedup.jdbc.JdbcDedupStore}.
 *
 * <p>Every method is atomic on its own, judges time by the store's clock, and throws {@link
 * DedupStoreException} when the store cannot be reached after its retries. State changes are fenced
 * by the claim: they apply only while the record is PROCESSING under the claim's token and claim
 * id, and return {@code false} (lease lost) otherwise, never overwriting a newer holder. The token
 * alone does not tell two holders apart: a key whose record vanished (a failover to a standby that
 * had not received it, an operator's DELETE, a purge) is claimed anew with token 1 again.
 */
public interface DedupStore {

  /**
   * Claims a key in one atomic step: inserts it as PROCESSING, or re-claims it when it is FAILED or
   * its lease has expired, provided the fingerprints (when both are known) agree. A PROCESSING
   * record written by a claim with the same {@link ClaimRequest#claimId()} (sent again after its
   * reply was lost) is answered as claimed with its token, and its lease and retention run from now
   * (the caller counts the lease from this call), never ending earlier than they did.
   */
  ClaimResult claim(ClaimRequest request);

  /**
   * For {@link DedupMode#TRANSACTIONAL}: records the key as SUCCESS inside the caller's open
   * transaction on the store's connection, so the record commits or rolls back with the caller's
   * work. A concurrent copy blocks on the key until that transaction ends. {@code request.lease()}
   * is not used; {@code request.retention()} is how long the SUCCESS record is kept.
   *
   * @throws DedupConfigurationException if no transaction is open on the store's connection: a
   *     set-up mistake, so the delivery waits until the application is fixed (a store that can
   *     never join a transaction, such as the test kit's in-memory store, throws {@code
   *     IllegalStateException})
   */
  ClaimResult claimInTransaction(ClaimRequest request);

  /**
   * For {@link DedupMode#TRANSACTIONAL}: marks FAILED, with {@code error}, a key that {@link
   * #claimInTransaction} claimed in the caller's open transaction and whose handler threw, in that
   * same transaction. The caller usually rolls back, and this goes with it; a caller that catches
   * the handler's failure and commits (a handler applying several keys in one transaction, going on
   * past one that failed) leaves the key FAILED, so that its next delivery retries it, as in mode
   * {@link DedupMode#SEPARATE}, instead of SUCCESS. The default does nothing.
   *
   * @return whether the claim's record was found and marked
   */
  default boolean failInTransaction(ClaimResult.Claimed claim, String error) {
    return false;
  }

  /**
   * For {@link DedupMode#TRANSACTIONAL}: whether the caller's open transaction still holds the
   * record that {@link #claimInTransaction} wrote in it, once the handler has returned. A database
   * that rolls the whole transaction back at a failed statement and goes on in a new one (InnoDB at
   * a deadlock) loses the record with everything before that statement, while the caller's commit
   * still succeeds. The default answers true: a store whose transaction cannot lose its writes that
   * way (on PostgreSQL the transaction stays aborted, and its commit is refused).
   */
  default boolean heldInTransaction(ClaimResult.Claimed claim) {
    return true;
  }

  /**
   * Marks the holder's attempt SUCCESS and keeps the record for {@code retention}. A SUCCESS the
   * claim has already written (sent again after its reply was lost) counts as written. A key with
   * no record at all (it vanished: a failover to a standby that had not received it, an operator's
   * DELETE, a purge) is written again as SUCCESS under the claim's token and id, so the effect
   * stays recorded and a redelivery is answered as a duplicate; stores say so in their log.
   *
   * @return false if the claim no longer holds the key (the lease was taken over, or the key was
   *     claimed anew after its record vanished)
   */
  boolean complete(ClaimResult.Claimed claim, Duration retention);

  /**
   * Marks the holder's attempt FAILED, so that the next delivery retries it. A FAILED the claim has
   * already written counts as written, and a key with no record at all is written again as FAILED,
   * as by {@link #complete}.
   *
   * @param error what went wrong; stores may truncate it
   * @return false if the claim no longer holds the key
   */
  boolean fail(ClaimResult.Claimed claim, String error, Duration retention);

  /**
   * Extends the holder's lease to {@code lease} from now.
   *
   * @return false if the claim no longer holds the key, or the key has no record at all (which
   *     {@link #find} tells apart)
   */
  boolean renew(ClaimResult.Claimed claim, Duration lease);

  /** Reads the record of a key. */
  Optional<DedupRecord> find(DedupKey key);

  /**
   * Deletes up to {@code limit} records whose retention has passed (never a live lease).
   *
   * @return how many records were deleted
   */
  int purge(int limit);

  /**
   * Gives back a claim whose handler never ran (the records after a failed one in a batch), without
   * counting an attempt: the key is as it was before the claim, except that a key the claim created
   * is gone, and the next delivery claims it as if this claim had not happened. Only the claim
   * itself is released: a later claim of the key is never touched.
   *
   * @return false if the claim no longer held the key
   */
  boolean release(ClaimResult.Claimed claim);

  /**
   * Claims several keys, as {@link #claim} each; the answer has one element per distinct key, in
   * first-seen order (a later copy of a key in the same batch is not claimed twice). The default
   * claims them one by one; stores may do it in one round trip.
   */
  default List<ClaimResult> claimAll(List<ClaimRequest> requests) {
    return distinct(requests).stream().map(this::claim).toList();
  }

  /**
   * Claims several keys in the caller's transaction, as {@link #claimInTransaction} each; answers
   * as {@link #claimAll}.
   */
  default List<ClaimResult> claimAllInTransaction(List<ClaimRequest> requests) {
    return distinct(requests).stream().map(this::claimInTransaction).toList();
  }

  /**
   * Completes several claims, as {@link #complete} each; the answer holds the keys whose lease was
   * lost. The default completes them one by one; stores may do it in one round trip.
   */
  default List<DedupKey> completeAll(List<ClaimResult.Claimed> claims, Duration retention) {
    return claims.stream()
        .filter(claim -> !complete(claim, retention))
        .map(ClaimResult.Claimed::key)
        .toList();
  }

  /**
   * Claims a key, as {@link #claim} does, and marks the claims in {@code completing} SUCCESS, as
   * {@link #completeAll} does, in one commit where the store can: for a caller that claims record
   * by record, the previous record's SUCCESS then costs no commit of its own. The marks are written
   * whatever the claim answers. The default completes them, then claims.
   *
   * @param completing held claims of other keys than the request's, whose handlers succeeded
   * @return the claim's answer, and the keys of {@code completing} whose lease was lost
   * @throws DedupStoreException as {@link #claim}; whether the marks were written is then unknown
   *     (a completion sent again recognises its own earlier write)
   */
  default ClaimCompleting claimCompleting(
      ClaimRequest request, List<ClaimResult.Claimed> completing, Duration retention) {
    List<DedupKey> lost = completeAll(completing, retention);
    return new ClaimCompleting(claim(request), lost);
  }

  /**
   * What {@link #claimCompleting} did.
   *
   * @param claim the claim's answer
   * @param leaseLost the keys of the claims to complete whose lease was lost
   */
  record ClaimCompleting(ClaimResult claim, List<DedupKey> leaseLost) {
    public ClaimCompleting {
      Objects.requireNonNull(claim, "claim");
      leaseLost = List.copyOf(leaseLost);
    }
  }

  /** Fails several claims, as {@link #fail} each; answers as {@link #completeAll}. */
  default List<DedupKey> failAll(List<Failure> failures, Duration retention) {
    return failures.stream()
        .filter(f -> !fail(f.claim(), f.error(), retention))
        .map(f -> f.claim().key())
        .toList();
  }

  /** Renews several leases, as {@link #renew} each; answers as {@link #completeAll}. */
  default List<DedupKey> renewAll(List<ClaimResult.Claimed> claims, Duration lease) {
    return claims.stream()
        .filter(claim -> !renew(claim, lease))
        .map(ClaimResult.Claimed::key)
        .toList();
  }

  /**
   * Releases several claims, as {@link #release} each; the answer holds the keys their claim no
   * longer held.
   */
  default List<DedupKey> releaseAll(List<ClaimResult.Claimed> claims) {
    return claims.stream().filter(claim -> !release(claim)).map(ClaimResult.Claimed::key).toList();
  }

  /**
   * Checks, where the store can, that its storage is set up (for a table: that it exists with every
   * column the store uses). {@link IdempotentExecutor.Builder#build()} calls it, so a forgotten
   * migration stops an application at start-up instead of failing every record. Storage that cannot
   * be reached is not an error here: records wait for it like for any outage.
   *
   * @throws IllegalStateException the storage is not set up; the message says what is missing and
   *     how to create it
   */
  default void verifyReady() {}

  /**
   * {@link #verifyReady()} for a store used in {@code mode}, which may ask more of the storage (in
   * mode TRANSACTIONAL the handler's own statements share the claim's connection). {@link
   * IdempotentExecutor.Builder#build()} calls this one; by default it is {@link #verifyReady()}.
   *
   * @throws IllegalStateException the storage is not set up
   * @throws DedupConfigurationException the storage cannot keep the promise of {@code mode}; the
   *     message says what to configure
   */
  default void verifyReady(DedupMode mode) {
    verifyReady();
  }

  /** The requests with the later copies of a key removed, in first-seen order. */
  static List<ClaimRequest> distinct(List<ClaimRequest> requests) {
    Set<DedupKey> seen = new HashSet<>();
    return requests.stream().filter(request -> seen.add(request.key())).toList();
  }

  /**
   * A claim to mark FAILED, with the error of its handler.
   *
   * @param error what went wrong; stores may truncate it
   */
  record Failure(ClaimResult.Claimed claim, String error) {
    public Failure {
      Objects.requireNonNull(claim, "claim");
      Objects.requireNonNull(error, "error");
    }
  }
}
