package io.consumerdedup.core;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Optional;
import java.util.Set;

/**
 * Where claims are recorded: the service provider interface behind {@link IdempotentExecutor}. The
 * PostgreSQL implementation is {@code io.consumerdedup.jdbc.JdbcDedupStore}.
 *
 * <p>Every method is atomic on its own, judges time by the store's clock, and throws {@link
 * DedupStoreException} when the store cannot be reached after its retries. State changes are
 * fenced: they apply only while the record is PROCESSING with the caller's token, and return {@code
 * false} (lease lost) otherwise, never overwriting a newer holder.
 */
public interface DedupStore {

  /**
   * Claims a key in one atomic step: inserts it as PROCESSING, or re-claims it when it is FAILED or
   * its lease has expired, provided the fingerprints (when both are known) agree.
   */
  ClaimResult claim(ClaimRequest request);

  /**
   * For {@link DedupMode#TRANSACTIONAL}: records the key as SUCCESS inside the caller's open
   * transaction on the store's connection, so the record commits or rolls back with the caller's
   * work. A concurrent copy blocks on the key until that transaction ends. {@code request.lease()}
   * is not used; {@code request.retention()} is how long the SUCCESS record is kept.
   *
   * @throws IllegalStateException if no transaction is open on the store's connection
   */
  ClaimResult claimInTransaction(ClaimRequest request);

  /**
   * Marks the holder's attempt SUCCESS and keeps the record for {@code retention}.
   *
   * @return false if the token no longer holds the key (the lease was taken over)
   */
  boolean complete(DedupKey key, int token, Duration retention);

  /**
   * Marks the holder's attempt FAILED, so that the next delivery retries it.
   *
   * @param error what went wrong; stores may truncate it
   * @return false if the token no longer holds the key (the lease was taken over)
   */
  boolean fail(DedupKey key, int token, String error, Duration retention);

  /**
   * Extends the holder's lease to {@code lease} from now.
   *
   * @return false if the token no longer holds the key
   */
  boolean renew(DedupKey key, int token, Duration lease);

  /** Reads the record of a key. */
  Optional<DedupRecord> find(DedupKey key);

  /**
   * Deletes up to {@code limit} records whose retention has passed (never a live lease).
   *
   * @return how many records were deleted
   */
  int purge(int limit);

  /**
   * Claims several keys; the answer has one element per distinct key, in first-seen order. The
   * default claims them one by one; stores may do it in one round trip.
   */
  default List<ClaimResult> claimAll(List<ClaimRequest> requests) {
    List<ClaimResult> results = new ArrayList<>(requests.size());
    Set<DedupKey> seen = new HashSet<>();
    for (ClaimRequest request : requests) {
      if (seen.add(request.key())) {
        results.add(claim(request));
      }
    }
    return results;
  }

  /**
   * Completes several claims; the answer holds the keys whose lease was lost. The default completes
   * them one by one; stores may do it in one round trip.
   */
  default List<DedupKey> completeAll(List<ClaimResult.Claimed> claims, Duration retention) {
    List<DedupKey> lost = new ArrayList<>();
    for (ClaimResult.Claimed claim : claims) {
      if (!complete(claim.key(), claim.token(), retention)) {
        lost.add(claim.key());
      }
    }
    return lost;
  }
}
