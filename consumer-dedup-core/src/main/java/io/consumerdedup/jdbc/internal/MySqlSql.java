package io.consumerdedup.jdbc.internal;

import io.consumerdedup.core.internal.StoredText;
import io.consumerdedup.core.internal.TakeoverNote;
import java.util.Collections;

/**
 * The MySQL and MariaDB statements of the store, for one validated table name: the counterpart of
 * {@link PostgresSql}. Every time is the database's, in UTC ({@code UTC_TIMESTAMP(6)} into {@code
 * DATETIME(6)} columns, so neither the session's nor the JVM's time zone moves it); durations are
 * bound as milliseconds. There are no arrays, no {@code RETURNING} (MySQL) and no writable CTEs, so
 * a claim takes a lock first and decides under it (see {@link #lockOrInsert}).
 */
public final class MySqlSql {

  /** Now, by the database clock. */
  static final String NOW = "UTC_TIMESTAMP(6)";

  /** Now plus a bound number of milliseconds. */
  static final String NOW_PLUS_MS = "UTC_TIMESTAMP(6) + INTERVAL (? * 1000) MICROSECOND";

  /**
   * The error of a FAILED record, bound as its UTF-8 bytes: the connection's character set does not
   * touch it. Bound as text through a connection that sends utf8mb3 (a {@code SET NAMES utf8}, a
   * server that forces its character set on clients), an error with a four-byte character (an
   * emoji) was refused, "Illegal mix of collations", so the FAILED was never written and the key
   * stayed held under a lease renewed until the process ended.
   */
  static final String ERROR_TEXT = "CONVERT(? USING utf8mb4) COLLATE utf8mb4_bin";

  /** The record columns as {@code JdbcDedupStore} reads them, with the key and lease_live. */
  private static final String RECORD_COLUMNS =
      "biz_type, biz_key, status, attempts, owner, lease_until, fingerprint, last_error, source,"
          + " created_at, updated_at, expires_at, claim_id,"
          + " (lease_until IS NOT NULL AND lease_until >= "
          + NOW
          + ") AS lease_live";

  private final String table;

  /** As {@link #find}, but a locking read of the current row, which the claim has locked. */
  public final String findLocked;

  public final String find;

  /**
   * Fenced by (type, key, token, claim id) as {@code PostgresSql#complete}; binds the retention in
   * ms and the claim id first, and the claim id again last.
   */
  public final String complete;

  /** Fenced as {@link #complete}; binds the error and the retention in ms first. */
  public final String fail;

  /** {@code Dialect.RecordSql#failInTransaction} in this dialect. */
  public final String failInTransaction;

  /** Fenced by (type, key, token, claim id); binds the lease in ms first. */
  public final String renew;

  /**
   * Writes SUCCESS again where {@link #complete} found no record at all (see {@code
   * PostgresSql#completeVanished}): binds (type, key, token, claim id, retention ms); a row that
   * exists meanwhile is left alone (IGNORE: the values bound are within the columns' limits, so
   * only the key can collide), and the fenced update, asked again, tells whether it is this outcome
   * written by another thread of the holder or a claim anew.
   */
  public final String completeVanished;

  /**
   * As {@link #completeVanished}, FAILED: binds (type, key, token, claim id, error, retention ms).
   */
  public final String failVanished;

  /** Release of a claim that created its key, by (type, key, token, claim id): deletes the row. */
  public final String releaseDelete;

  /**
   * Release of a re-claim, by (type, key, token, claim id): back to FAILED, attempt not counted.
   */
  public final String releaseRestore;

  /** The table's columns, by (schema or null for the current database, table name). */
  public final String columns;

  /**
   * The databases other than the one looked in, by (database or null for the current one, table
   * name), that hold a table of the name. With no current database (a URL that names none) every
   * database that holds one.
   */
  public static final String DATABASES_WITH_TABLE =
      "SELECT table_schema FROM information_schema.tables WHERE table_name = ?"
          + " AND table_schema <> COALESCE(?, DATABASE(), '')"
          + " AND table_type IN ('BASE TABLE', 'SYSTEM VERSIONED') ORDER BY table_schema";

  /**
   * The bytes that the text bound reaches a key column as (hex), and the character set in which the
   * connection sends text.
   */
  public static final String CLIENT_CHARSET =
      "SELECT HEX(CAST(? AS BINARY)), @@character_set_client";

  /** The text bound, as the server received it, in the connection's character set. */
  public static final String ECHO = "SELECT CAST(? AS BINARY)";

  /**
   * The key columns' types and collations, by (schema or null for the current database, table
   * name), in the primary key's order.
   */
  public static final String KEY_COLUMN_TYPES =
      "SELECT column_name, data_type, collation_name FROM information_schema.columns"
          + " WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?"
          + " AND column_name IN ('biz_type', 'biz_key') ORDER BY column_name DESC";

  public MySqlSql(String table) {
    this.table = table;
    find = "SELECT " + RECORD_COLUMNS + " FROM " + table + " WHERE biz_type = ? AND biz_key = ?";
    findLocked = find + " FOR UPDATE";
    failInTransaction =
        "UPDATE "
            + table
            + " SET status = 'FAILED', last_error = "
            + ERROR_TEXT
            + ", updated_at = "
            + NOW
            + ""
            + " WHERE biz_type = ? AND biz_key = ? AND attempts = ? AND claim_id = ?"
            + " AND status = 'SUCCESS'";
    // The claim's own row, or a settled one with no claim id (see Dialect.FencedUpdate#FAIL).
    String fencedWhere =
        " WHERE biz_type = ? AND biz_key = ? AND attempts = ?"
            + " AND (claim_id = ? OR (claim_id IS NULL AND status <> 'PROCESSING')) AND ";
    // A FAILED that a takeover given back unrun left to this attempt is still its holder's (see
    // PostgresSql#givenBack), and the SUCCESS takes the holder's claim id, which such a row lacks.
    complete =
        "UPDATE "
            + table
            + " SET status = 'SUCCESS', lease_until = NULL, last_error = NULL, updated_at = "
            + NOW
            + ", expires_at = "
            + NOW_PLUS_MS
            + ", claim_id = COALESCE(claim_id, ?)"
            + fencedWhere
            + "(status IN ('PROCESSING', 'SUCCESS') OR (status = 'FAILED' AND claim_id IS NULL"
            // Starts with the note naming this claim (bound last): the claim id, not only the
            // attempt, as a claim of the key anew after its record vanished has attempt 1 too.
            + " AND LOCATE(CONCAT('"
            + TakeoverNote.BEFORE_ATTEMPT
            + "', attempts, '"
            + TakeoverNote.BEFORE_CLAIM
            + "', ?, '"
            + TakeoverNote.BEFORE_OWNER
            + "'), last_error) = 1))";
    fail =
        "UPDATE "
            + table
            // last_error first: MySQL's SET sees the values assigned before it, and the note is
            // kept only on a row that was FAILED already (see PostgresSql#keepingReleaseNote).
            + " SET last_error = CASE WHEN status = 'FAILED' AND last_error LIKE '"
            + io.consumerdedup.core.internal.LeaseLoss.RELEASE_NOTE_PREFIX
            + "%' THEN last_error ELSE "
            + ERROR_TEXT
            + " END, status = 'FAILED', lease_until = NULL, updated_at = "
            + NOW
            + ", expires_at = "
            + NOW_PLUS_MS
            + fencedWhere
            + "status IN ('PROCESSING', 'FAILED')";
    renew =
        "UPDATE "
            + table
            + " SET lease_until = "
            + NOW_PLUS_MS
            + ", updated_at = "
            + NOW
            + fencedWhere
            + "status = 'PROCESSING'";
    completeVanished = vanished("'SUCCESS'", "NULL");
    failVanished = vanished("'FAILED'", ERROR_TEXT);
    String held =
        " WHERE biz_type = ? AND biz_key = ? AND attempts = ? AND claim_id = ?"
            + " AND status = 'PROCESSING'";
    releaseDelete = "DELETE FROM " + table + held + " AND attempts = 1";
    releaseRestore =
        "UPDATE "
            + table
            + " SET status = 'FAILED', attempts = attempts - 1, lease_until = NULL, claim_id = NULL,"
            + " updated_at = "
            + NOW
            + held
            + " AND attempts > 1";
    columns =
        "SELECT column_name FROM information_schema.columns"
            + " WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?";
  }

  private String vanished(String status, String error) {
    return "INSERT IGNORE INTO "
        + table
        + " (biz_type, biz_key, status, attempts, claim_id, owner, last_error, created_at,"
        + " updated_at, expires_at) VALUES (?, ?, "
        + status
        + ", ?, ?, '"
        + PostgresSql.VANISHED_OWNER
        + "', "
        + error
        + ", "
        + NOW
        + ", "
        + NOW
        + ", "
        + NOW_PLUS_MS
        + ")";
  }

  /**
   * Inserts the rows of requests that are new, in key order, and locks the existing rows of the
   * others without changing them ({@code ON DUPLICATE KEY UPDATE} a no-op takes an exclusive lock
   * on the row it meets). Per row binds (type, key, owner, lease ms, fingerprint, source, keep ms,
   * claim id). After it, in the same transaction, every key's row exists and is ours to judge and
   * update until commit: a concurrent claim of the key waits on that lock, so nothing is checked
   * before it is locked. A PROCESSING row with the request's own claim id (an earlier try committed
   * and its reply was lost) gets a lease and retention from now as it is locked ({@link
   * #renewOwnClaim}): the caller takes it up again and counts its lease from this statement, and
   * the old one may be almost over.
   *
   * @param withLease insert as PROCESSING under a lease, or as SUCCESS at once (in the caller's
   *     transaction)
   */
  public String lockOrInsert(int rows, boolean withLease) {
    String row =
        "(?, ?, "
            + status(withLease)
            + ", 1, ?, "
            + leaseUntil(withLease)
            + ", ?, ?, "
            + NOW
            + ", "
            + NOW
            + ", "
            + NOW_PLUS_MS
            + ", ?)";
    return "INSERT INTO "
        + table
        + " (biz_type, biz_key, status, attempts, owner, lease_until, fingerprint, source,"
        + " created_at, updated_at, expires_at, claim_id) VALUES "
        + String.join(", ", Collections.nCopies(rows, row))
        + " ON DUPLICATE KEY UPDATE "
        + (withLease ? renewOwnClaim() : "biz_key = biz_key");
  }

  /**
   * The update of a locked row that, only for the inserting request's own claim, counts the lease
   * and the retention from now, as a claim made now would set them, but never ends them earlier
   * than they did: a copy of the claim with a shorter lease or retention does not cut the ones the
   * caller may count on. (The condition reads neither column it changes, so MySQL's left-to-right
   * assignment does not matter.)
   */
  private static String renewOwnClaim() {
    // Its id sent with another payload is a conflict, not that claim; compared as bytes, as the
    // column's collation pads with spaces.
    String own =
        "status = 'PROCESSING' AND claim_id = VALUES(claim_id) AND (fingerprint IS NULL"
            + " OR VALUES(fingerprint) IS NULL"
            + " OR CAST(fingerprint AS BINARY) = CAST(VALUES(fingerprint) AS BINARY))";
    return "lease_until = IF("
        + own
        + ", GREATEST(lease_until, VALUES(lease_until)), lease_until), expires_at = IF("
        + own
        + ", GREATEST(expires_at, VALUES(expires_at)), expires_at), updated_at = IF("
        + own
        + ", VALUES(updated_at), updated_at)";
  }

  /**
   * A locking read of {@code rows} keys, each bound as (type, key): one lookup of the primary key
   * per key, which locks that key's row and no other. A read of all the keys in one {@code WHERE}
   * is planned by what the server knows of the table: where the batch is large for the table (a new
   * deployment, a large poll) it scans the table or every row of the biz type, and a locking read
   * locks every row it scans until the claim commits, so claims of other keys waited on each other
   * and deadlocked, and waited out a whole transaction that held another key (mode TRANSACTIONAL).
   * {@code FORCE INDEX} does not prevent it: the scan of a biz type's rows is a read of that index
   * too.
   */
  public String findLocked(int rows) {
    if (rows == 1) {
      return findLocked;
    }
    return String.join(" UNION ALL ", Collections.nCopies(rows, "(" + findLocked + ")"));
  }

  /**
   * A plain read of {@code rows} keys, each bound as (type, key): InnoDB answers it from a
   * snapshot, taking no lock.
   */
  public String find(int rows) {
    return "SELECT "
        + RECORD_COLUMNS
        + " FROM "
        + table
        + " WHERE "
        + String.join(" OR ", Collections.nCopies(rows, "(biz_type = ? AND biz_key = ?)"));
  }

  /**
   * Takes over a locked row that a FAILED attempt or an expired lease left claimable: binds (owner,
   * lease ms, claim id, fingerprint, source, keep ms, type, key, attempts as read).
   */
  public String takeOver(boolean withLease) {
    return "UPDATE "
        + table
        + " SET last_error = "
        + lastErrorOfTakeOver(withLease)
        + ", status = "
        + status(withLease)
        + ", attempts = attempts + 1, owner = ?, lease_until = "
        + leaseUntil(withLease)
        + ", claim_id = ?, fingerprint = COALESCE(fingerprint, ?), source = ?, updated_at = "
        + NOW
        + ", expires_at = "
        + NOW_PLUS_MS
        + " WHERE biz_type = ? AND biz_key = ? AND attempts = ?";
  }

  /**
   * The error a claim that takes a row over leaves on it, assigned first: MySQL's SET sees the
   * values assigned before it, and this reads the status, attempt, claim id, owner and error the
   * claim replaces. A takeover of an expired lease notes whose lease it took, the previous error
   * after the note (see {@code PostgresSql#givenBack}); a claim of a FAILED row keeps its error, as
   * the previous attempt's, until its own outcome; a key claimed as SUCCESS at once keeps no error
   * of an earlier failed attempt.
   */
  private static String lastErrorOfTakeOver(boolean withLease) {
    if (!withLease) {
      return "NULL";
    }
    return "IF(status = 'PROCESSING', LEFT(CONCAT('"
        + TakeoverNote.BEFORE_ATTEMPT
        + "', attempts, '"
        + TakeoverNote.BEFORE_CLAIM
        + "', COALESCE(claim_id, ''), '"
        + TakeoverNote.BEFORE_OWNER
        + "', owner, '"
        + TakeoverNote.END
        + "', COALESCE(CONCAT('"
        + TakeoverNote.BEFORE_PREVIOUS_ERROR
        + "', last_error), '')), "
        + StoredText.MAX_ERROR_LENGTH
        + "), last_error)";
  }

  private static String status(boolean withLease) {
    return withLease ? "'PROCESSING'" : "'SUCCESS'";
  }

  /** The lease's end; binds the lease in ms, ignored (multiplied into a NULL) without a lease. */
  private static String leaseUntil(boolean withLease) {
    return withLease ? NOW_PLUS_MS : "(NULL + ?)";
  }
}
