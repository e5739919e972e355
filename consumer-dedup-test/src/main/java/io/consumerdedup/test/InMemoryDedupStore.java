package io.consumerdedup.test;

import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.internal.StoredText;
import io.consumerdedup.core.internal.TakeoverNote;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import org.jspecify.annotations.Nullable;

/**
 * A {@link DedupStore} in memory, <strong>for tests only</strong>: nothing is durable, nothing is
 * shared between JVMs, and a restart forgets every key. It answers as {@code JdbcDedupStore} does:
 * leases expire by its clock, writes are fenced by the claim (its token, the record's attempt
 * count, and its claim id: a holder whose lease was taken over, or whose record vanished and was
 * claimed anew, is refused on complete, fail and renew), a FAILED key or an expired lease is
 * claimed again with the next token, SUCCESS makes later deliveries duplicates, payload
 * fingerprints must agree, a completion or failure sent again by its claim counts as written, and
 * one whose record vanished under its holder (a purge, {@link #clear()}) is written again under its
 * claim. A claim that took over an expired lease and was given back unrun leaves the key to the
 * holder it took it from, whose SUCCESS is written. Thread-safe: every call is atomic.
 *
 * <p>Give it a {@link TestClock} to let leases and retention run out without waiting:
 *
 * <pre>{@code
 * TestClock clock = new TestClock();
 * InMemoryDedupStore store = new InMemoryDedupStore(clock);
 * IdempotentExecutor executor = IdempotentExecutor.builder(store).build();
 * }</pre>
 *
 * <p>It has no transactions, so {@link DedupMode#TRANSACTIONAL} needs the JDBC store: an executor
 * built for that mode on this store is refused ({@link #verifyReady(DedupMode)}), and {@link
 * #claimInTransaction} refuses.
 */
public final class InMemoryDedupStore implements DedupStore {

  private final Clock clock;
  private final Map<DedupKey, Row> rows = new HashMap<>();

  /** A store on the system clock. */
  public InMemoryDedupStore() {
    this(Clock.systemUTC());
  }

  /** A store that judges leases and retention by {@code clock}. */
  public InMemoryDedupStore(Clock clock) {
    this.clock = Objects.requireNonNull(clock, "clock");
  }

  @Override
  public synchronized ClaimResult claim(ClaimRequest request) {
    Instant now = clock.instant();
    DedupKey key = request.key();
    Row row = rows.get(key);
    if (row == null) {
      rows.put(key, Row.claimed(request, now));
      return new ClaimResult.Claimed(key, 1, request.claimId());
    }
    if (row.status == DedupStatus.PROCESSING
        && request.claimId().equals(row.claimId)
        && !otherPayload(row, request)) {
      // This request's own claim, sent again after its reply was lost: taken up again with a
      // lease and retention from now, as the caller counts them, never cut short by a copy of the
      // claim with shorter ones.
      row.leaseUntil = latest(row.leaseUntil, now.plus(request.lease()));
      row.expiresAt = latest(row.expiresAt, now.plus(request.lease()).plus(request.retention()));
      row.updatedAt = now;
      return new ClaimResult.Claimed(key, row.attempts, request.claimId());
    }
    if (settles(row, request, now)) {
      return new ClaimResult.Taken(key, row.toRecord(key, now));
    }
    // FAILED, or PROCESSING under an expired lease: the next attempt, with the next token.
    row.reclaim(request, now);
    return new ClaimResult.Claimed(key, row.attempts, request.claimId());
  }

  private static Instant latest(@Nullable Instant held, Instant asked) {
    return held == null || held.isBefore(asked) ? asked : held;
  }

  /** Whether the row answers the claim without a change: SUCCESS, a live lease, another payload. */
  private static boolean settles(Row row, ClaimRequest request, Instant now) {
    return otherPayload(row, request) || row.status == DedupStatus.SUCCESS || row.leaseLive(now);
  }

  /**
   * Whether the row was claimed for another payload: then even its own claim id, sent with the next
   * claim of the key, does not make the request that claim.
   */
  private static boolean otherPayload(Row row, ClaimRequest request) {
    return row.fingerprint != null
        && request.fingerprint() != null
        && !row.fingerprint.equals(request.fingerprint());
  }

  /**
   * Refuses: the in-memory store has no transactions to join.
   *
   * @throws IllegalStateException always
   */
  @Override
  public ClaimResult claimInTransaction(ClaimRequest request) {
    throw new IllegalStateException(
        "InMemoryDedupStore has no transactions, so DedupMode.TRANSACTIONAL cannot join one (key "
            + request.key()
            + "): test mode TRANSACTIONAL against JdbcDedupStore on a real database");
  }

  /**
   * Refuses mode TRANSACTIONAL, so that an executor built for it stops where it is built: at its
   * first record, {@link #claimInTransaction}'s refusal would be taken for the handler's failure,
   * the record tried again and dead-lettered, as production on the JDBC store never does.
   *
   * @throws DedupConfigurationException in mode TRANSACTIONAL
   */
  @Override
  public void verifyReady(DedupMode mode) {
    if (mode == DedupMode.TRANSACTIONAL) {
      throw new DedupConfigurationException(
          "InMemoryDedupStore has no transactions, so DedupMode.TRANSACTIONAL cannot join one:"
              + " test mode TRANSACTIONAL against JdbcDedupStore on a real database",
          null,
          null);
    }
  }

  @Override
  public synchronized boolean complete(ClaimResult.Claimed claim, Duration retention) {
    Row row = heldOrRewritten(claim, DedupStatus.PROCESSING, DedupStatus.SUCCESS);
    if (row == null) {
      row = givenBack(claim);
    }
    if (row == null) {
      return false;
    }
    Instant now = clock.instant();
    if (row.claimId == null) {
      // Written on a takeover given back, which has no claim id: sent again, it is recognised.
      row.claimId = claim.claimId();
    }
    row.status = DedupStatus.SUCCESS;
    row.leaseUntil = null;
    row.lastError = null;
    row.updatedAt = now;
    row.expiresAt = now.plus(retention);
    return true;
  }

  /**
   * The row of {@code claim}'s key if it is FAILED because a claim that took over the expired lease
   * of {@code claim}'s attempt was given back unrun (no claim id, the takeover's note kept, as
   * {@link TakeoverNote} says): nothing ran the handler after that attempt, so its SUCCESS is the
   * key's outcome.
   */
  private @Nullable Row givenBack(ClaimResult.Claimed claim) {
    Row row = rows.get(claim.key());
    return row != null
            && row.status == DedupStatus.FAILED
            && row.claimId == null
            && row.attempts == claim.token()
            && TakeoverNote.isOf(row.lastError, row.attempts, claim.claimId())
        ? row
        : null;
  }

  @Override
  public synchronized boolean fail(ClaimResult.Claimed claim, String error, Duration retention) {
    Row row = heldOrRewritten(claim, DedupStatus.PROCESSING, DedupStatus.FAILED);
    if (row == null) {
      return false;
    }
    Instant now = clock.instant();
    row.status = DedupStatus.FAILED;
    row.leaseUntil = null;
    row.lastError = StoredText.storable(error, StoredText.MAX_ERROR_LENGTH);
    row.updatedAt = now;
    row.expiresAt = now.plus(retention);
    return true;
  }

  @Override
  public synchronized boolean renew(ClaimResult.Claimed claim, Duration lease) {
    Row row = held(claim, DedupStatus.PROCESSING, DedupStatus.PROCESSING);
    if (row == null) {
      return false;
    }
    Instant now = clock.instant();
    row.leaseUntil = now.plus(lease);
    row.updatedAt = now;
    return true;
  }

  /**
   * {@link #held}, or for a key with no record at all (it vanished under its holder: {@link
   * #clear()}, a purge of a lease that ran out with its retention) a record made anew under {@code
   * claim}, which the caller then writes its outcome into, as the JDBC store writes an outcome
   * again where its record vanished (a failover to a standby that had not received it, a DELETE, a
   * purge): a key claimed anew meanwhile is left to its new holder.
   */
  private @Nullable Row heldOrRewritten(
      ClaimResult.Claimed claim, DedupStatus holding, DedupStatus written) {
    if (rows.containsKey(claim.key())) {
      return held(claim, holding, written);
    }
    Row row = Row.vanished(claim, clock.instant());
    rows.put(claim.key(), row);
    return row;
  }

  /**
   * The row if {@code claim} still holds it, in one of two states (the second is the state a write
   * sent again by the claim has already set). The token alone is not enough: a key claimed anew
   * after its record vanished starts again at token 1. As the JDBC store, a holder whose lease ran
   * out but was not taken over still holds the key, and a settled row with no claim id (a release
   * gave the key back to the attempt before) is its token's.
   */
  private @Nullable Row held(ClaimResult.Claimed claim, DedupStatus holding, DedupStatus written) {
    Row row = rows.get(claim.key());
    if (row == null || row.attempts != claim.token()) {
      return null;
    }
    boolean own =
        claim.claimId().equals(row.claimId)
            || (row.claimId == null && row.status != DedupStatus.PROCESSING);
    return own && (row.status == holding || row.status == written) ? row : null;
  }

  @Override
  public synchronized boolean release(ClaimResult.Claimed claim) {
    Row row = rows.get(claim.key());
    if (row == null
        || row.status != DedupStatus.PROCESSING
        || row.attempts != claim.token()
        || !claim.claimId().equals(row.claimId)) {
      return false;
    }
    if (row.attempts == 1) {
      rows.remove(claim.key());
    } else {
      row.status = DedupStatus.FAILED;
      row.attempts--;
      row.leaseUntil = null;
      row.claimId = null;
      row.updatedAt = clock.instant();
    }
    return true;
  }

  @Override
  public synchronized Optional<DedupRecord> find(DedupKey key) {
    Row row = rows.get(key);
    return row == null ? Optional.empty() : Optional.of(row.toRecord(key, clock.instant()));
  }

  @Override
  public synchronized int purge(int limit) {
    if (limit < 1) {
      throw new IllegalArgumentException("limit must be at least 1, was " + limit);
    }
    Instant now = clock.instant();
    List<Map.Entry<DedupKey, Row>> expired = new ArrayList<>();
    for (Map.Entry<DedupKey, Row> entry : rows.entrySet()) {
      Row row = entry.getValue();
      boolean liveLease =
          row.status == DedupStatus.PROCESSING
              && row.leaseUntil != null
              && !row.leaseUntil.isBefore(now);
      if (row.expiresAt.isBefore(now) && !liveLease) {
        expired.add(entry);
      }
    }
    expired.sort(Comparator.comparing(entry -> entry.getValue().createdAt));
    List<Map.Entry<DedupKey, Row>> batch = expired.subList(0, Math.min(limit, expired.size()));
    batch.forEach(entry -> rows.remove(entry.getKey()));
    return batch.size();
  }

  /** How many records the store holds, whatever their state. */
  public synchronized int size() {
    return rows.size();
  }

  /** Forgets every record, as a fresh store would. */
  public synchronized void clear() {
    rows.clear();
  }

  /** The record of one key, as the JDBC store's row holds it. */
  private static final class Row {
    DedupStatus status;
    int attempts;
    String owner;
    @Nullable Instant leaseUntil;
    @Nullable String fingerprint;
    @Nullable String lastError;
    @Nullable String source;
    final Instant createdAt;
    Instant updatedAt;
    Instant expiresAt;
    @Nullable String claimId;

    private Row(
        int attempts,
        String owner,
        @Nullable Instant leaseUntil,
        @Nullable String fingerprint,
        @Nullable String source,
        Instant now,
        Instant expiresAt,
        @Nullable String claimId) {
      this.status = DedupStatus.PROCESSING;
      this.attempts = attempts;
      this.owner = owner;
      this.leaseUntil = leaseUntil;
      this.fingerprint = fingerprint;
      this.source = source;
      this.createdAt = now;
      this.updatedAt = now;
      this.expiresAt = expiresAt;
      this.claimId = claimId;
    }

    static Row claimed(ClaimRequest request, Instant now) {
      return new Row(
          1,
          request.owner(),
          now.plus(request.lease()),
          request.fingerprint(),
          StoredText.storable(request.source(), StoredText.MAX_SOURCE_LENGTH),
          now,
          now.plus(request.lease()).plus(request.retention()),
          request.claimId());
    }

    /**
     * A record made anew for the outcome of {@code claim} whose record vanished, as the JDBC store
     * writes it: no lease, fingerprint or source, its holder unknown.
     */
    static Row vanished(ClaimResult.Claimed claim, Instant now) {
      return new Row(
          claim.token(), StoredText.VANISHED_OWNER, null, null, null, now, now, claim.claimId());
    }

    /**
     * The next attempt; the first fingerprint and the last error stay, and a claim that takes over
     * an expired lease notes it before that error ({@link TakeoverNote}).
     */
    void reclaim(ClaimRequest request, Instant now) {
      if (status == DedupStatus.PROCESSING) {
        // Named by its claim id: a key claimed anew after its record vanished has attempt 1 again.
        lastError =
            TakeoverNote.of(attempts, Objects.requireNonNullElse(claimId, ""), owner, lastError);
      }
      status = DedupStatus.PROCESSING;
      attempts++;
      owner = request.owner();
      leaseUntil = now.plus(request.lease());
      claimId = request.claimId();
      if (fingerprint == null) {
        fingerprint = request.fingerprint();
      }
      source = StoredText.storable(request.source(), StoredText.MAX_SOURCE_LENGTH);
      updatedAt = now;
      expiresAt = now.plus(request.lease()).plus(request.retention());
    }

    boolean leaseLive(Instant now) {
      return status == DedupStatus.PROCESSING && leaseUntil != null && !leaseUntil.isBefore(now);
    }

    DedupRecord toRecord(DedupKey key, Instant now) {
      return new DedupRecord(
          key,
          status,
          attempts,
          owner,
          leaseUntil,
          fingerprint,
          lastError,
          source,
          createdAt,
          updatedAt,
          expiresAt,
          leaseUntil != null && !leaseUntil.isBefore(now));
    }
  }
}
