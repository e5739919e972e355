package io.consumerdedup.core;

import java.time.Instant;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import org.jspecify.annotations.Nullable;

/**
 * Operations on the dedup records without SQL, for an operator (an Actuator endpoint, a CLI): what
 * is there, what is stuck or failed, and the two changes that unstick a key. Every dialect of the
 * store implements it ({@code JdbcDedupAdmin}). Each change is logged at INFO with who asked and
 * the record as it was, at WARN when forced over a live lease.
 *
 * <p>Every operation may throw, as the store's calls do:
 *
 * <ul>
 *   <li>{@link IllegalArgumentException}: a request that cannot be asked (a limit out of range, a
 *       filter or a cursor no record can have, a requester that is not valid text), named; nothing
 *       is changed;
 *   <li>{@link DedupStoreDataException}: the database refused a value of the request;
 *   <li>{@link DedupStoreUnavailableException}: the table did not answer after the store's retries
 *       (the database down, the pool exhausted or closed, a DataSource that threw a {@code
 *       RuntimeException} instead of giving a connection, its cause); ask again later;
 *   <li>{@link DedupStoreException}: the database failed otherwise (a permission missing, the table
 *       missing), with its reason.
 * </ul>
 *
 * A change whose reply was lost is tried again, and recognised as made.
 *
 * <p>A record whose status a newer version of consumer-dedup wrote (sharing the table during a
 * rolling upgrade) is read as {@link DedupStatus#UNKNOWN}, its text in {@link
 * DedupRecord#storedStatus()}, and listed and counted beside the others; release and forget leave
 * it alone unless forced, as what its status means is that version's to say.
 */
public interface DedupAdmin {

  /** How many records each biz type has in each status. */
  List<StatusCount> counts();

  /**
   * Longest {@code requestedBy} of a release or forget, in characters: the note a release writes
   * names it beside the holder, within the 2000 characters of {@code last_error}.
   */
  int MAX_REQUESTED_BY_LENGTH = 256;

  /** One page of records that match {@code query}, oldest first (by creation). */
  Page list(RecordQuery query);

  /** The record of {@code key}, if there is one. */
  Optional<DedupRecord> find(DedupKey key);

  /**
   * Ends the lease of a PROCESSING key whose lease has run out by the store's clock, as {@link
   * #release(DedupKey, String, boolean)} without {@code force}: a live lease is refused.
   *
   * @param requestedBy who asked, for the log and the record
   */
  default Change release(DedupKey key, String requestedBy) {
    return release(key, requestedBy, false);
  }

  /**
   * Ends the lease of a PROCESSING key now: the attempt is marked FAILED (its {@code last_error}
   * names who released it), so the next delivery of the key claims it with the next fencing token
   * and runs the handler. The old holder, should it still run, can no longer complete, renew or
   * otherwise write the key as PROCESSING or SUCCESS: its token no longer holds it.
   *
   * <p>A lease that is still live by the store's clock is refused ({@link Change#applied()} false,
   * the message says why) unless {@code force}: a live holder renews its lease while its handler
   * runs, so it is most likely alive, and releasing it lets the next delivery run the handler while
   * the holder still applies its effect (applied twice; the holder's SUCCESS is then refused as a
   * lost lease). Force only a holder known to be dead or hung for good.
   *
   * <p>A record of a status this version does not know ({@link DedupStatus#UNKNOWN}) is not
   * released, forced or not: the message names its status.
   *
   * @param requestedBy who asked, for the log and the record
   * @param force release a live lease too: the operator asserts its holder is dead
   */
  Change release(DedupKey key, String requestedBy, boolean force);

  /**
   * Deletes the record of {@code key} so a replay of the key applies it again, as {@link
   * #forget(DedupKey, String, boolean)} without {@code force}: a PROCESSING key under a live lease
   * is refused.
   *
   * @param requestedBy who asked, for the log
   */
  default Change forget(DedupKey key, String requestedBy) {
    return forget(key, requestedBy, false);
  }

  /**
   * Deletes the record of {@code key} (SUCCESS, FAILED, or PROCESSING whose lease has run out by
   * the store's clock), so the next delivery or a replay of the key claims it anew and runs the
   * handler again.
   *
   * <p>A PROCESSING key whose lease is still live is refused ({@link Change#applied()} false, the
   * message says why) unless {@code force}, as {@link #release(DedupKey, String, boolean)} refuses
   * it: its holder renews the lease while its handler runs, so it is most likely alive, and without
   * the record the next delivery claims the key anew and runs the handler while the holder still
   * applies it (applied twice). A forced forget does not stop a holder that still runs: its
   * renewals find no record, and when its handler ends it writes its outcome again, unless a
   * delivery has claimed the key anew by then. To end a dead holder's lease, prefer a release,
   * which fences the holder out; force only a holder known to be dead or hung for good.
   *
   * <p>A record of a status this version does not know ({@link DedupStatus#UNKNOWN}, written by a
   * newer version that may still work on the key) is refused the same way unless {@code force}.
   *
   * @param requestedBy who asked, for the log
   * @param force forget a PROCESSING key under a live lease too: the operator asserts its holder is
   *     dead
   */
  Change forget(DedupKey key, String requestedBy, boolean force);

  /**
   * The records of one biz type in one status; {@code expiredLeases} counts PROCESSING ones.
   *
   * @param storedStatus the status as the table holds it: each status a newer version wrote ({@link
   *     DedupStatus#UNKNOWN}) is counted on its own, under its text
   */
  record StatusCount(
      String bizType, DedupStatus status, long count, long expiredLeases, String storedStatus) {
    public StatusCount {
      Objects.requireNonNull(bizType, "bizType");
      Objects.requireNonNull(status, "status");
      DedupStatus.requireStored(status, storedStatus);
    }

    /** The count of a status this version knows. */
    public StatusCount(String bizType, DedupStatus status, long count, long expiredLeases) {
      this(bizType, status, count, expiredLeases, status.name());
    }
  }

  /** Which PROCESSING records a list shows. */
  enum LeaseFilter {
    /** Any record. */
    ANY,
    /** PROCESSING records whose holder still has its lease. */
    LIVE,
    /** PROCESSING records whose lease has run out: the next delivery takes them over. */
    EXPIRED
  }

  /**
   * What to list: every filter is optional; {@code after} is the {@link Page#next()} of the page
   * before (keyset paging: stable while records are added or removed).
   *
   * @param status the status whose records to list; {@link DedupStatus#UNKNOWN} lists those of
   *     every status this version does not know
   * @param bizType the type whose records to list, checked as {@link DedupKey#of} checks a type
   *     (the drivers would send an unpaired surrogate as '?', the filter of another type)
   * @param limit at most this many records, 1 to 1000
   * @throws IllegalArgumentException naming the filter that cannot be asked
   */
  record RecordQuery(
      @Nullable DedupStatus status,
      @Nullable String bizType,
      LeaseFilter lease,
      int limit,
      @Nullable String after) {
    public RecordQuery {
      Objects.requireNonNull(lease, "lease");
      if (bizType != null) {
        DedupKey.requireValidBizType(bizType);
      }
      if (limit < 1 || limit > 1000) {
        throw new IllegalArgumentException("limit must be 1 to 1000, was " + limit);
      }
    }

    /** Every record, {@code limit} at a time. */
    public static RecordQuery all(int limit) {
      return new RecordQuery(null, null, LeaseFilter.ANY, limit, null);
    }
  }

  /**
   * A page of records and the cursor of the next page, absent on the last one.
   *
   * @param next the value for {@link RecordQuery#after()} that continues after this page
   */
  record Page(List<DedupRecord> records, @Nullable String next) {
    public Page {
      records = List.copyOf(records);
    }

    public Optional<String> nextCursor() {
      return Optional.ofNullable(next);
    }
  }

  /**
   * The answer to a change.
   *
   * @param applied whether the record was changed
   * @param before the record as it was, absent if there was none
   * @param message what happened, for a person
   * @param at when the change was made, by the database's clock as it read the record (the times of
   *     the record and of a release's note are the database's too); when there was no record, by
   *     this JVM's clock
   */
  record Change(boolean applied, @Nullable DedupRecord before, String message, Instant at) {
    public Change {
      Objects.requireNonNull(message, "message");
      Objects.requireNonNull(at, "at");
    }

    public Optional<DedupRecord> previous() {
      return Optional.ofNullable(before);
    }
  }
}
