package io.consumerdedup.jdbc;

import io.consumerdedup.core.DedupAdmin;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.internal.LeaseLoss;
import io.consumerdedup.jdbc.internal.Dialect;
import io.consumerdedup.jdbc.internal.StoreCalls;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Function;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * {@link DedupAdmin} over the table of a {@link JdbcDedupStore}, in its dialect (PostgreSQL, MySQL,
 * MariaDB), with its retries and timeouts. Reads scan what they must (the counts read the whole
 * table): they are meant for an operator, not for every request.
 */
public final class JdbcDedupAdmin implements DedupAdmin {
  private static final Logger log = LoggerFactory.getLogger(JdbcDedupAdmin.class);

  private final StoreCalls calls;

  private JdbcDedupAdmin(JdbcDedupStore store) {
    this.calls = store.calls();
  }

  /** The admin operations on the table of {@code store}. */
  public static JdbcDedupAdmin of(JdbcDedupStore store) {
    return new JdbcDedupAdmin(Objects.requireNonNull(store, "store"));
  }

  @Override
  public List<StatusCount> counts() {
    return calls.run(
        "admin counts",
        null,
        (connection, dialect) -> {
          List<StatusCount> counts = new ArrayList<>();
          try (PreparedStatement statement = calls.prepare(connection, dialect.adminSql().counts);
              ResultSet rows = statement.executeQuery()) {
            while (rows.next()) {
              String status = rows.getString("status");
              counts.add(
                  new StatusCount(
                      rows.getString("biz_type"),
                      DedupStatus.ofStored(status),
                      rows.getLong("records"),
                      rows.getLong("expired"),
                      status));
            }
          }
          return counts;
        });
  }

  @Override
  public Page list(RecordQuery query) {
    Cursor after = query.after() == null ? null : Cursor.parse(query.after());
    String lease = query.lease() == LeaseFilter.ANY ? null : query.lease().name();
    return calls.run(
        "admin list",
        null,
        (connection, dialect) -> {
          String text =
              dialect
                  .adminSql()
                  .list(query.status(), query.bizType() != null, lease, after != null);
          List<DedupRecord> records = new ArrayList<>();
          try (PreparedStatement statement = calls.prepare(connection, text)) {
            int index = 1;
            if (query.status() != null && query.status() != DedupStatus.UNKNOWN) {
              statement.setString(index++, query.status().name());
            }
            if (query.bizType() != null) {
              statement.setString(index++, query.bizType());
            }
            if (after != null) {
              Object createdAt = dialect.time(after.createdAt());
              statement.setObject(index++, createdAt);
              statement.setObject(index++, createdAt);
              statement.setString(index++, after.bizType());
              statement.setString(index++, after.bizType());
              statement.setString(index++, after.bizKey());
            }
            statement.setInt(index, query.limit() + 1);
            try (ResultSet rows = statement.executeQuery()) {
              while (rows.next()) {
                records.add(dialect.recordAsStored(rows));
              }
            }
          }
          if (records.size() <= query.limit()) {
            return new Page(records, null);
          }
          List<DedupRecord> page = records.subList(0, query.limit());
          DedupRecord last = page.get(page.size() - 1);
          return new Page(page, Cursor.of(last).encode());
        });
  }

  @Override
  public Optional<DedupRecord> find(DedupKey key) {
    // Not the store's find, which the consumers' paths use: they refuse a status they do not know,
    // while an operator is to see it.
    return calls.run(
        "admin find",
        key,
        (connection, dialect) -> {
          try (PreparedStatement select = calls.prepare(connection, dialect.adminSql().find)) {
            dialect.bindKey(connection, select, 1, key);
            try (ResultSet row = select.executeQuery()) {
              return row.next()
                  ? Optional.of(dialect.recordAsStored(row, key))
                  : Optional.<DedupRecord>empty();
            }
          }
        });
  }

  @Override
  public Change release(DedupKey key, String requestedBy, boolean force) {
    // The release a try sent: a retry that finds it written knows its own commit made it.
    AtomicReference<@Nullable SentRelease> sent = new AtomicReference<>();
    return changeRecord(
        "admin release",
        key,
        requestedBy,
        at -> noRecord(key, at),
        (c, dialect, before, who, at) -> {
          if (before.status() == DedupStatus.UNKNOWN) {
            // The release's update is for PROCESSING records only: force cannot make it apply.
            return refusedUnknownStatus(AdminChange.RELEASE, key, who, before, at);
          }
          if (before.status() != DedupStatus.PROCESSING) {
            SentRelease earlier = sent.get();
            if (earlier != null && earlier.wrote(before)) {
              return released(key, earlier.before(), earlier.live(), at);
            }
            return new Change(
                false,
                before,
                key + " is " + before.status() + ", not PROCESSING: nothing to release",
                at);
          }
          boolean live = before.isLeaseLive();
          if (live && !force) {
            return refusedUnderLiveLease(AdminChange.RELEASE, key, who, before, at);
          }
          String note =
              "Released by "
                  + who
                  + (live ? " (forced, while its lease was live)" : "")
                  + " at "
                  + at.truncatedTo(ChronoUnit.SECONDS)
                  + " while held by "
                  + before.owner()
                  + LeaseLoss.releaseNoteEnd(before.attempts());
          try (PreparedStatement update = calls.prepare(c, dialect.adminSql().release)) {
            dialect.setError(update, 1, note);
            // As long from the release as the claim's expiry was from the key's first claim: at
            // least the claim's lease and retention, however long its holder renewed the lease.
            update.setLong(
                2,
                Math.max(0, Duration.between(before.createdAt(), before.expiresAt()).toMillis()));
            dialect.bindKey(c, update, 3, key);
            update.setInt(5, before.attempts());
            sent.set(new SentRelease(before, live, note));
            update.executeUpdate();
          }
          logDone(AdminChange.RELEASE, key, who, before, live ? OVER_LIVE_LEASE : null);
          return released(key, before, live, at);
        });
  }

  /** A release sent to the database, with the note it writes on the record. */
  private record SentRelease(DedupRecord before, boolean live, String note) {
    /** Whether {@code now} is the record this release left: the same claim, FAILED, its note. */
    boolean wrote(DedupRecord now) {
      return now.status() == DedupStatus.FAILED
          && sameClaim(before, now)
          && now.lastError().filter(note::equals).isPresent();
    }
  }

  private static Change released(DedupKey key, DedupRecord before, boolean live, Instant at) {
    return new Change(
        true,
        before,
        "Released "
            + key
            + (live ? " (forced while its lease was live)" : "")
            + ": attempt "
            + before.attempts()
            + " of "
            + before.owner()
            + " is FAILED now; the next delivery takes the key with attempt "
            + (before.attempts() + 1),
        at);
  }

  /** The two changes that can take a key from its holder, as their messages name them. */
  private enum AdminChange {
    RELEASE("release", "Released", "Not released", "Releasing", "the next delivery runs it again"),
    FORGET("forget", "Forgot", "Not forgotten", "Forgetting", "a replay of it applies it again");

    final String verb;
    final String done;
    final String notDone;
    final String doing;
    final String consequence;

    AdminChange(String verb, String done, String notDone, String doing, String consequence) {
      this.verb = verb;
      this.done = done;
      this.notDone = notDone;
      this.doing = doing;
      this.consequence = consequence;
    }
  }

  /** A change of a key under a live lease, refused, saying why and what to do instead. */
  private static Change refusedUnderLiveLease(
      AdminChange change, DedupKey key, String who, DedupRecord before, Instant at) {
    log.info(
        "Did not {} {} at the request of {}: its lease is live; {}", change.verb, key, who, before);
    return new Change(
        false,
        before,
        change.notDone
            + ": "
            + key
            + " is held by "
            + before.owner()
            + " (attempt "
            + before.attempts()
            + ") under a live lease until "
            + before.leaseUntil().map(Instant::toString).orElse("?")
            + ", last written at "
            + before.updatedAt()
            + ": its holder renews it while its handler runs, so it is most likely alive. "
            + change.doing
            + " it now lets the next delivery run the handler while the holder may still apply"
            + " it: the effect would be applied twice. Wait for the lease to run out (the next"
            + " delivery then takes the key over), or, if you know the holder is dead or hung for"
            + " good, "
            + change.verb
            + " with force=true",
        at);
  }

  /**
   * A change of a record whose status a newer version wrote, refused: that version may still work
   * on the key (a status of its own for a held key), and only it knows.
   */
  private static Change refusedUnknownStatus(
      AdminChange change, DedupKey key, String who, DedupRecord before, Instant at) {
    log.info(
        "Did not {} {} at the request of {}: its status {} is not one this version knows; {}",
        change.verb,
        key,
        who,
        before.storedStatus(),
        before);
    boolean forgetting = change == AdminChange.FORGET;
    return new Change(
        false,
        before,
        change.notDone
            + ": "
            + key
            + " has the status '"
            + before.storedStatus()
            + "' (attempt "
            + before.attempts()
            + " of "
            + before.owner()
            + ", last written at "
            + before.updatedAt()
            + "), which this version of consumer-dedup does not know: a newer version sharing"
            + " the table wrote it, and what it means is that version's to say. "
            + (forgetting
                ? "If that version still works on the key, forgetting it now lets a replay run the"
                    + " handler beside it: the effect would be applied twice. Forget it with that"
                    + " version, or, if you know nothing works on the key any more, forget with"
                    + " force=true"
                : change.doing
                    + " it here is not possible: "
                    + change.verb
                    + " it with that version"),
        at);
  }

  /** What a change was forced over, as its log and message say it: a live lease. */
  private static final String OVER_LIVE_LEASE = "while its lease was live";

  /** What a change was forced over: a status this version does not know. */
  private static String overUnknownStatus(DedupRecord before) {
    return "over the status '" + before.storedStatus() + "', which this version does not know";
  }

  /**
   * A forced change is a WARN: it may let a live holder's handler run a second time.
   *
   * @param forced what the change was forced over; null if it was not forced
   */
  private static void logDone(
      AdminChange change, DedupKey key, String who, DedupRecord before, @Nullable String forced) {
    if (forced != null) {
      log.warn(
          "{} {} at the request of {}, forced {}: if its holder is alive, the handler runs a"
              + " second time; it was {}",
          change.done,
          key,
          who,
          forced,
          before);
    } else {
      log.info(
          "{} {} at the request of {}: {}; it was {}",
          change.done,
          key,
          who,
          change.consequence,
          before);
    }
  }

  @Override
  public Change forget(DedupKey key, String requestedBy, boolean force) {
    // The record a try sent its delete for: a retry that finds no record knows it is gone.
    AtomicReference<@Nullable SentForget> sent = new AtomicReference<>();
    return changeRecord(
        "admin forget",
        key,
        requestedBy,
        at -> {
          SentForget earlier = sent.get();
          if (earlier == null) {
            return noRecord(key, at);
          }
          Change forgot = forgot(key, earlier.before(), earlier.forced(), at);
          return new Change(
              true,
              forgot.before(),
              forgot.message()
                  + " (an earlier try sent the delete and lost its reply; no record is left)",
              at);
        },
        (c, dialect, before, who, at) -> {
          boolean unknown = before.status() == DedupStatus.UNKNOWN;
          if (unknown && !force) {
            return refusedUnknownStatus(AdminChange.FORGET, key, who, before, at);
          }
          boolean live = before.isLeaseLive();
          if (live && !force) {
            return refusedUnderLiveLease(AdminChange.FORGET, key, who, before, at);
          }
          String forced = unknown ? overUnknownStatus(before) : live ? OVER_LIVE_LEASE : null;
          try (PreparedStatement delete = calls.prepare(c, dialect.adminSql().forget)) {
            dialect.bindKey(c, delete, 1, key);
            sent.set(new SentForget(before, forced));
            delete.executeUpdate();
          }
          logDone(AdminChange.FORGET, key, who, before, forced);
          return forgot(key, before, forced, at);
        });
  }

  /** A delete sent to the database, and what it was forced over (null if not forced). */
  private record SentForget(DedupRecord before, @Nullable String forced) {}

  private static Change forgot(
      DedupKey key, DedupRecord before, @Nullable String forced, Instant at) {
    return new Change(
        true,
        before,
        "Forgot "
            + key
            + (forced != null ? " (forced " + forced + ")" : "")
            + ": a replay of the key runs its handler again",
        at);
  }

  /** A change of one record, locked in a transaction of its own. */
  @FunctionalInterface
  private interface RecordChange {
    Change apply(Connection connection, Dialect dialect, DedupRecord before, String who, Instant at)
        throws SQLException;
  }

  private static Change noRecord(DedupKey key, Instant at) {
    return new Change(false, null, "No record of " + key, at);
  }

  /** Runs {@code change} on the key's record, locked; {@code absent} answers when there is none. */
  private Change changeRecord(
      String operation,
      DedupKey key,
      String requestedBy,
      Function<Instant, Change> absent,
      RecordChange change) {
    Instant at = Instant.now();
    String who = requester(requestedBy);
    // A try whose commit reached the database but whose reply was lost is tried again, and by then
    // the next delivery may hold the key under a claim of its own: the change is for the claim the
    // first try found, never for a later one.
    AtomicReference<@Nullable Locked> firstRead = new AtomicReference<>();
    return calls.run(
        operation,
        key,
        (connection, dialect) ->
            dialect.inOwnTransaction(
                connection,
                c -> {
                  Locked locked = lockedRecord(c, dialect, key);
                  if (locked == null) {
                    return absent.apply(at);
                  }
                  DedupRecord before = locked.record();
                  // The database's time, as the record's are: the JVM's, minutes off, dated a
                  // release's note before or after the row it wrote.
                  Instant readAt = locked.readAt();
                  Locked first = firstRead.get();
                  if (first == null) {
                    firstRead.set(locked);
                  } else if (!first.sameClaim(locked)) {
                    return claimedSinceFirstTry(operation, key, first.record(), before, at);
                  }
                  return change.apply(c, dialect, before, who, readAt);
                }));
  }

  /**
   * A key's record as a change locked it, with the id of the claim on it (null if none) and the
   * database's time when it was read.
   */
  private record Locked(DedupRecord record, @Nullable String claimId, Instant readAt) {
    /**
     * Whether two reads show the same claim. The attempts alone do not tell: a claim given back (a
     * poll's record never reached) counts its attempt back, and the next claim counts it again.
     */
    boolean sameClaim(Locked now) {
      return JdbcDedupAdmin.sameClaim(record, now.record) && Objects.equals(claimId, now.claimId);
    }
  }

  /**
   * Whether two reads of a key's record show the same claim: a later claim counts one more attempt,
   * or, for a key forgotten meanwhile, starts a record of its own.
   */
  private static boolean sameClaim(DedupRecord first, DedupRecord now) {
    return first.attempts() == now.attempts() && first.createdAt().equals(now.createdAt());
  }

  private static Change claimedSinceFirstTry(
      String operation, DedupKey key, DedupRecord first, DedupRecord now, Instant at) {
    log.warn(
        "Left {} alone on a retry of {}: the first try found attempt {} of {}, whose change may have"
            + " been made (its reply was lost); the key has been claimed since: {}",
        key,
        operation,
        first.attempts(),
        first.owner(),
        now);
    return new Change(
        false,
        now,
        "Not changed: the first try found "
            + key
            + " at attempt "
            + first.attempts()
            + " of "
            + first.owner()
            + " and its reply was lost, so its change may have been made; the key has been"
            + " claimed since (attempt "
            + now.attempts()
            + " of "
            + now.owner()
            + ", "
            + now.status()
            + "), which this request did not see. Look at the record and ask again if it is"
            + " still to be changed",
        at);
  }

  private @Nullable Locked lockedRecord(Connection connection, Dialect dialect, DedupKey key)
      throws SQLException {
    try (PreparedStatement select = calls.prepare(connection, dialect.adminSql().findLocked)) {
      dialect.bindKey(connection, select, 1, key);
      try (ResultSet row = select.executeQuery()) {
        return row.next()
            ? new Locked(
                dialect.recordAsStored(row, key),
                row.getString("claim_id"),
                Objects.requireNonNull(dialect.instant(row, "read_at")))
            : null;
      }
    }
  }

  private static String requester(String requestedBy) {
    if (requestedBy == null || requestedBy.isBlank()) {
      throw new IllegalArgumentException("requestedBy must name who asked for the change");
    }
    String who = requestedBy.strip();
    // It goes to the log and the record's note as it is: a line break there would forge a line of
    // the audit trail, and a NUL is refused by PostgreSQL but stored by MySQL. An unpaired
    // surrogate is sent by both drivers as '?': the note would name someone else.
    for (int i = 0; i < who.length(); i++) {
      char c = who.charAt(i);
      if (Character.isISOControl(c)) {
        throw new IllegalArgumentException(
            "requestedBy must not contain control characters (U+"
                + String.format("%04X", (int) c)
                + " at index "
                + i
                + ")");
      }
      if (Character.isSurrogate(c)) {
        if (Character.isHighSurrogate(c)
            && i + 1 < who.length()
            && Character.isLowSurrogate(who.charAt(i + 1))) {
          i++;
        } else {
          throw new IllegalArgumentException(
              "requestedBy must be valid text: unpaired surrogate at index " + i);
        }
      }
    }
    if (who.length() > MAX_REQUESTED_BY_LENGTH) {
      throw new IllegalArgumentException(
          "requestedBy is longer than "
              + MAX_REQUESTED_BY_LENGTH
              + " characters ("
              + who.length()
              + ")");
    }
    return who;
  }

  /** Where a page ended: the last record's creation time and key, as an opaque token. */
  private record Cursor(Instant createdAt, String bizType, String bizKey) {
    private static final Instant EARLIEST = Instant.parse("0001-01-01T00:00:00Z");
    private static final Instant LATEST = Instant.parse("9999-12-31T23:59:59.999999Z");

    static Cursor of(DedupRecord record) {
      return new Cursor(record.createdAt(), record.key().bizType(), record.key().bizKey());
    }

    String encode() {
      String text =
          createdAt.getEpochSecond() + "." + createdAt.getNano() + "\n" + bizType + "\n" + bizKey;
      return Base64.getUrlEncoder()
          .withoutPadding()
          .encodeToString(text.getBytes(StandardCharsets.UTF_8));
    }

    static Cursor parse(String token) {
      try {
        String text = new String(Base64.getUrlDecoder().decode(token), StandardCharsets.UTF_8);
        String[] parts = text.split("\n", 3);
        String[] time = parts[0].split("\\.", 2);
        Instant createdAt = Instant.ofEpochSecond(Long.parseLong(time[0]), Long.parseLong(time[1]));
        // Beyond the times both databases store, MySQL and MariaDB compare it as some other time
        // (a cursor millions of years ahead listed from the start) and PostgreSQL refuses it.
        if (createdAt.isBefore(EARLIEST) || createdAt.isAfter(LATEST)) {
          throw new IllegalArgumentException("a creation time of " + createdAt);
        }
        // A key no record can have (a NUL, an unpaired surrogate): the database would refuse it,
        // or the driver would send another key.
        DedupKey key = new DedupKey(parts[1], parts[2]);
        return new Cursor(createdAt, key.bizType(), key.bizKey());
      } catch (RuntimeException e) {
        throw new IllegalArgumentException(
            "Not a cursor of this list: '" + token + "' (" + e.getMessage() + ")", e);
      }
    }
  }
}
