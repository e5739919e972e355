package io.consumerdedup.jdbc.internal;

import io.consumerdedup.core.internal.StoredText;
import io.consumerdedup.core.internal.TakeoverNote;
import java.sql.Types;
import java.util.Arrays;
import java.util.List;
import java.util.function.Function;
import java.util.stream.Collectors;
import org.jspecify.annotations.Nullable;

/**
 * The PostgreSQL statements of the store, for one validated table name. Every time is the
 * database's ({@code now()}); durations are bound as milliseconds. The claims and the outcomes take
 * their keys as rows ({@link Keyed}: scalars for one key, arrays for many), so one statement serves
 * one key or a whole poll's keys in one round trip. Renewals and releases are statements of one
 * key, which a group runs as one JDBC batch ({@link #renew}).
 */
public final class PostgresSql {

  /** How a statement's rows of keys are bound. */
  public enum Type {
    TEXT("text", "text", Types.VARCHAR),
    BIGINT("bigint", "int8", Types.BIGINT),
    INT("int", "int4", Types.INTEGER);

    /** The type in a cast. */
    final String sql;

    /** The element type for {@link java.sql.Connection#createArrayOf}. */
    public final String arrayElement;

    /** The {@link Types} constant for a scalar parameter. */
    public final int jdbc;

    Type(String sql, String arrayElement, int jdbc) {
      this.sql = sql;
      this.arrayElement = arrayElement;
      this.jdbc = jdbc;
    }
  }

  /**
   * A statement over rows of keys, in two texts: for one row, with a scalar parameter per column
   * (the server caches a generic plan for it, where a one-element array would be planned anew on
   * each call, since its estimate differs from the generic one), and for several rows, with an
   * array per column ({@code unnest}).
   */
  public record Keyed(String one, String many) {
    /** The text for {@code rows} rows. */
    public String forRows(int rows) {
      return rows == 1 ? one : many;
    }
  }

  /**
   * Builds a {@link Keyed} statement: {@code statement} receives the row source, aliased {@code r}
   * with {@code columns}.
   */
  private static Keyed keyed(Function<String, String> statement, String columns, Type... types) {
    String one =
        Arrays.stream(types).map(type -> "?::" + type.sql).collect(Collectors.joining(", "));
    String many =
        Arrays.stream(types).map(type -> "?::" + type.sql + "[]").collect(Collectors.joining(", "));
    return new Keyed(
        statement.apply("(VALUES (" + one + ")) AS r(" + columns + ")"),
        statement.apply("unnest(" + many + ") AS r(" + columns + ")"));
  }

  /**
   * The order in which a statement of several keys locks them, whatever the database's collation:
   * byte order, which in a UTF8 (or SQL_ASCII, LATIN1) database is code point order, the order of
   * the store's own batches ({@code Dialect.KEY_ORDER}); other encodings order characters beyond
   * ASCII by their own bytes.
   */
  private static final String KEY_ORDER = "r.biz_type COLLATE \"C\", r.biz_key COLLATE \"C\"";

  /** The columns of a record as {@code JdbcDedupStore} reads it, from the alias {@code c}. */
  private static final String RECORD_COLUMNS =
      "c.status, c.attempts, c.owner, c.lease_until, c.fingerprint, c.last_error, c.source,"
          + " c.created_at, c.updated_at, c.expires_at, c.lease_live, c.claim_id";

  /**
   * Claims the keys of rows of requests (type, key, owner, lease ms, keep ms, fingerprint, source,
   * claim id) in one statement, in key order so that concurrent batches lock rows in the same order
   * and cannot deadlock on each other. Answers one row per request: {@code claimed}, the new token,
   * when the request claimed its key; else the record as it stood ({@code c.*}, null when there was
   * none), which says why not.
   *
   * <p>A key whose record already settles the answer (SUCCESS, a live lease, another payload) is
   * answered from the statement's snapshot: no insert is attempted, so no row is locked and no
   * transaction id is taken, and a batch of duplicates commits without writing anything. Only the
   * rest go through {@code INSERT ... ON CONFLICT DO UPDATE ... WHERE}, which judges the row as it
   * is now (a concurrent change included) and claims a new key, a FAILED one or an expired lease. A
   * PROCESSING row with the request's own claim id (an earlier try committed and its reply was
   * lost) goes the same way: it is answered as claimed with its token, and its lease and retention
   * run from now, as a claim made now would set them, but never end earlier than they did.
   */
  public final Keyed claim;

  /**
   * As {@link #claim}, but the rows are written as SUCCESS at once, in the caller's transaction:
   * the unique key makes a concurrent copy wait for that transaction's outcome.
   */
  public final Keyed claimInTransaction;

  /**
   * {@link #claim} for one request, after a CTE {@code m} that marks claims SUCCESS as {@link
   * #complete} does, for rows of (type, key, token, claim id) bound first (after the retention):
   * one statement and one commit for a claim and the previous record's SUCCESS. Its rows carry
   * {@code marked}, the number of claims it marked. The claims to mark are of other keys than the
   * request's, so the claim's snapshot does not need to see them marked.
   */
  public final Keyed claimCompleting;

  public final String find;

  /**
   * Fenced, for rows of (type, key, token, claim id): applies only where the claim still holds the
   * key, and answers the keys it applied to. A SUCCESS the claim has already written matches too,
   * so a retry whose first reply was lost sees its own write, not a lost lease ({@link #ownRow}).
   * Each row is found through the primary key whatever the planner knows of the table ({@link
   * #outcome}).
   */
  public final Keyed complete;

  /**
   * Fenced like {@link #complete}, for rows of (type, key, token, claim id, error); a FAILED the
   * claim has already written matches too.
   */
  public final Keyed fail;

  /** {@code Dialect.RecordSql#failInTransaction} in this dialect. */
  public final String failInTransaction;

  /**
   * Extends the lease of one PROCESSING record, fenced like {@link #complete}: binds (lease ms,
   * type, key, token, claim id); its update count (1 or 0) says whether the claim still held the
   * key. A group of keys runs it as one JDBC batch, which pgjdbc sends in one round trip per few
   * hundred keys. Each execution is an equality on the primary key, which PostgreSQL probes
   * whatever it knows of the table, and judges the row as it is now, as any UPDATE's re-check does.
   * A group's single {@code UPDATE ... FROM unnest(...)} was a join, planned as a hash join over a
   * sequential scan of the whole table when the table had no statistics or the plan was cached
   * while it was empty; probing each key in one statement ({@link #probe}) still leaves the
   * UPDATE's own join to the table to the planner.
   */
  public final String renew;

  /**
   * Writes SUCCESS again, for rows of (type, key, token, claim id), where {@link #complete} found
   * no record at all: it vanished under its holder (a failover to a standby that had not received
   * it, an operator's DELETE, a purge), and the handler's effect must stay recorded. Inserts only
   * where there is still no record, so a key claimed anew meanwhile is left to its new holder, and
   * with the claim id, so that the completion sent again recognises it; a record in place that is
   * this outcome already (another thread of the holder wrote it again at the same moment) counts as
   * written. Binds the retention first, as {@link #complete}; answers the keys it wrote.
   */
  public final Keyed completeVanished;

  /**
   * As {@link #completeVanished}, FAILED with its error, for rows of (type, key, token, claim id,
   * error).
   */
  public final Keyed failVanished;

  /** The owner written with an outcome whose record vanished: its holder is not known here. */
  public static final String VANISHED_OWNER = StoredText.VANISHED_OWNER;

  /**
   * Gives back a claim whose handler never ran and that created its key (token 1): deletes the
   * record, for (type, key, token, claim id). Only the claim itself (its id) can release it, so a
   * release sent again after its reply was lost cannot touch a later claim of the key. Its update
   * count says whether it released the key; a group runs it as a batch, as {@link #renew}.
   */
  public final String releaseDelete;

  /**
   * As {@link #releaseDelete}, for a re-claim (token over 1): the record goes back to FAILED with
   * its earlier attempt count, so the release does not count an attempt. The note of a takeover
   * stays: the holder whose lease it took may still write its SUCCESS ({@link #givenBack}).
   */
  public final String releaseRestore;

  /**
   * Deletes one batch of expired rows, oldest first along the {@code created_at} index. SKIP LOCKED
   * lets many instances purge at once without waiting on each other or on a claim; a PROCESSING row
   * with a live lease is never deleted.
   */
  public final String purge;

  /**
   * Sent with each of the retention purge's statements (a batch, the one-shot {@link #purge}, the
   * backlog estimate) in one text, which runs as one transaction ({@link
   * PostgresDialect#purgeText}): for that transaction only ({@code set_config} with {@code
   * is_local}), the planner may not read the table by a sequential or bitmap scan, nor sort,
   * hash-join or merge-join where another plan exists. What is left is the plan the purge is
   * written for whatever the planner knows: a walk along the {@code created_at} index in its order
   * (an incremental sort breaks ties of created_at on the primary key's columns, a few rows at a
   * time), and a primary-key probe per row to delete (a nested loop).
   *
   * <p>Why settings, not a statement's shape, as {@link #probe} does for a group's keys: a batch
   * orders and filters its rows, and whether walking the index beats scanning and sorting the table
   * depends on how many rows the planner guesses the filters keep. On a table never analyzed it
   * guesses few, under the batch's limit, so it costs the walk as reading the index's whole range
   * at random and plans a sequential scan and a sort of the whole table (278 ms a batch of 1,000 at
   * 1M rows, against 5 ms); a plan made while the table was empty is kept however much it grows;
   * and analyzed, the {@code DELETE ... USING batch} was a hash join at 100k rows. A walk one row
   * per step ({@code WITH RECURSIVE ... LIMIT 1}) would be chosen at any size but costs an index
   * descent per row, and a recursive query cannot lock its rows ({@code FOR UPDATE SKIP LOCKED}),
   * so skipping the rows claims and other janitors hold would change. The settings end with the
   * transaction, so a transaction-pooling PgBouncer hands the server connection on as it was; every
   * execution of the purge's statements runs under them, so the plan the server keeps for a
   * prepared one was made under them too. A disabled plan node only costs more (about 10^10): the
   * sort of a batch's deleted rows, which only a sort can do, stays, and that cost would make the
   * server compile every batch with JIT (half a second measured), hence {@code jit} off.
   */
  public static final String PURGE_PLANS =
      "SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off',"
          + " true), set_config('enable_sort', 'off', true), set_config('enable_hashjoin', 'off',"
          + " true), set_config('enable_mergejoin', 'off', true), set_config('jit', 'off', true)";

  /** The table's columns, or no row when there is no such table (on the search path). */
  public final String columns;

  /**
   * The storage options ({@code fillfactor=50}, ...; a null array when none is set) of the table,
   * {@code whole}, or of each leaf partition of a partitioned one: PostgreSQL keeps a fillfactor
   * only on those, and refuses one on the partitioned table. No row when there is no such table.
   */
  public static final String STORAGE_OPTIONS =
      "SELECT c.oid = t.oid AS whole, c.oid::regclass::text AS name, c.reloptions"
          + " FROM (SELECT to_regclass(?) AS oid) t, pg_class c WHERE c.relkind = 'r'"
          + " AND (c.oid = t.oid"
          + " OR c.oid IN (SELECT p.relid FROM pg_partition_tree(t.oid) p WHERE p.isleaf))";

  /**
   * The schemas holding a table of the name bound (unqualified, folded to lower case as PostgreSQL
   * folds an unquoted name), however the connection's search_path reads.
   */
  public static final String SCHEMAS_WITH_TABLE =
      "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
          + " WHERE c.relname = lower(?) AND c.relkind IN ('r', 'p') ORDER BY n.nspname";

  /**
   * The fillfactor the schema file gives the table: half of each page is kept for the new versions
   * of the rows a poll claimed, so that their marks are HOT updates.
   */
  public static final int SCHEMA_FILLFACTOR = 50;

  /** The columns the store reads and writes, as the schema file creates them. */
  public static final List<String> EXPECTED_COLUMNS =
      List.of(
          "biz_type",
          "biz_key",
          "status",
          "attempts",
          "owner",
          "lease_until",
          "fingerprint",
          "last_error",
          "source",
          "created_at",
          "updated_at",
          "expires_at",
          "claim_id");

  public PostgresSql(String table) {
    columns =
        "SELECT a.attname FROM pg_attribute a WHERE a.attrelid = to_regclass(?)"
            + " AND a.attnum > 0 AND NOT a.attisdropped";
    claim = claim(table, true);
    claimInTransaction = claim(table, false);
    // A FAILED that a takeover given back unrun left to this attempt is still its holder's.
    String completable = "d.status IN ('PROCESSING', 'SUCCESS') OR ";
    find =
        "SELECT c.biz_type, c.biz_key, "
            + RECORD_COLUMNS
            + " FROM (SELECT d.*, (d.lease_until >= now()) AS lease_live FROM "
            + table
            + " d WHERE d.biz_type = ? AND d.biz_key = ?) c";
    // The claim id of a SUCCESS written on a takeover given back, which has none, is its holder's:
    // sent again after its reply was lost, it is recognised as written.
    String completeSet =
        "status = 'SUCCESS', lease_until = NULL, last_error = NULL, updated_at = now(),"
            + " expires_at = now() + ? * interval '1 millisecond',"
            + " claim_id = COALESCE(d.claim_id, r.claim_id)";
    complete =
        new Keyed(
            fenced(table, completeSet, null, "(" + completable + givenBack("r.claim_id") + ")")
                .one(),
            outcome(
                    table,
                    "'SUCCESS'",
                    null,
                    "(" + completable + givenBack("excluded.claim_id") + ")")
                .many());
    String claimOne = claim.one();
    claimCompleting =
        new Keyed(
            claimCompleting(complete.one(), claimOne), claimCompleting(complete.many(), claimOne));
    String failable = "d.status IN ('PROCESSING', 'FAILED')";
    fail =
        new Keyed(
            fenced(
                    table,
                    "status = 'FAILED', lease_until = NULL, last_error = "
                        + keepingReleaseNote("d.last_error", "r.error")
                        + ", updated_at = now(), expires_at = now() + ? * interval '1 millisecond'",
                    "error",
                    failable)
                .one(),
            outcome(table, "'FAILED'", "error", failable).many());
    failInTransaction =
        "UPDATE "
            + table
            + " SET status = 'FAILED', last_error = ?, updated_at = now()"
            + " WHERE biz_type = ? AND biz_key = ? AND attempts = ? AND claim_id = ?"
            + " AND status = 'SUCCESS'";
    String claimHeld =
        " WHERE d.biz_type = ? AND d.biz_key = ? AND d.attempts = ? AND d.status = 'PROCESSING'"
            + " AND d.claim_id = ?";
    renew =
        "UPDATE "
            + table
            + " AS d SET lease_until = now() + ? * interval '1 millisecond', updated_at = now()"
            + claimHeld;
    completeVanished = vanished(table, "'SUCCESS'", null);
    failVanished = vanished(table, "'FAILED'", "error");
    releaseDelete = "DELETE FROM " + table + " AS d" + claimHeld + " AND d.attempts = 1";
    releaseRestore =
        "UPDATE "
            + table
            + " AS d SET status = 'FAILED', attempts = d.attempts - 1, lease_until = NULL,"
            + " claim_id = NULL, updated_at = now()"
            + claimHeld
            + " AND d.attempts > 1";
    purge =
        "DELETE FROM "
            + table
            + " WHERE (biz_type, biz_key) IN (SELECT biz_type, biz_key FROM "
            + table
            + " WHERE expires_at < now() AND (status <> 'PROCESSING' OR lease_until < now())"
            + " ORDER BY created_at LIMIT ? FOR UPDATE SKIP LOCKED)";
  }

  private static Keyed claim(String table, boolean withLease) {
    String status = withLease ? "'PROCESSING'" : "'SUCCESS'";
    String leaseUntil = withLease ? "now() + r.lease_ms * interval '1 millisecond'" : "NULL";
    String takeable =
        "(d.status = 'FAILED' OR (d.status = 'PROCESSING' AND d.lease_until < now()))"
            + " AND (d.fingerprint IS NULL OR excluded.fingerprint IS NULL"
            + " OR d.fingerprint = excluded.fingerprint)";
    String answered =
        "(c.status = 'SUCCESS' OR (c.status = 'PROCESSING' AND c.lease_live)"
            + " OR (c.fingerprint IS NOT NULL AND r.fingerprint IS NOT NULL"
            + " AND c.fingerprint <> r.fingerprint))";
    // The request's own claim, committed by an earlier try whose reply was lost, is taken up again
    // with its token and a lease from now: the caller's renewal counts the lease from this
    // statement, and the old one may be almost over.
    // A copy of it with a shorter lease or retention never cuts them short: the caller may count
    // on the longer ones.
    // Its id sent with another payload (the next claim of the key from the process that lost the
    // reply) is a conflict, not that claim.
    String own =
        "(d.status = 'PROCESSING' AND d.claim_id = excluded.claim_id"
            + " AND (d.fingerprint IS NULL OR excluded.fingerprint IS NULL"
            + " OR d.fingerprint = excluded.fingerprint))";
    String attempts =
        withLease
            ? "CASE WHEN " + own + " THEN d.attempts ELSE d.attempts + 1 END"
            : "d.attempts + 1";
    String leaseUntilSet =
        withLease
            ? "CASE WHEN "
                + own
                + " THEN GREATEST(d.lease_until, excluded.lease_until) ELSE excluded.lease_until END"
            : "excluded.lease_until";
    String expiresAtSet =
        withLease
            ? "CASE WHEN "
                + own
                + " THEN GREATEST(d.expires_at, excluded.expires_at) ELSE excluded.expires_at END"
            : "excluded.expires_at";
    // A takeover of an expired lease notes whose lease it took ({@link #givenBack}); a claim of a
    // FAILED key keeps its error, as the previous attempt's, until its own outcome. A key claimed
    // as SUCCESS at once (in the caller's transaction) keeps no error of an earlier attempt.
    String lastErrorSet =
        withLease
            ? "CASE WHEN "
                + own
                + " THEN d.last_error WHEN d.status = 'PROCESSING' THEN "
                + takeoverNote()
                + " ELSE d.last_error END"
            : "NULL";
    String claimable = withLease ? "(" + takeable + ") OR " + own : takeable;
    String settled =
        withLease
            ? answered
                + " AND NOT (c.status = 'PROCESSING' AND c.claim_id IS NOT DISTINCT FROM r.claim_id"
                + " AND (c.fingerprint IS NULL OR r.fingerprint IS NULL"
                + " OR c.fingerprint = r.fingerprint))"
            : answered;
    // One key's row source flattens into an equality on the primary key, which PostgreSQL probes
    // whatever it knows; a group's is read through {@link #probe}.
    Sets sets = new Sets(attempts, leaseUntilSet, expiresAtSet, lastErrorSet);
    Keyed joined = claimKeyed(table, status, leaseUntil, sets, claimable, settled, false);
    Keyed probed = claimKeyed(table, status, leaseUntil, sets, claimable, settled, true);
    return new Keyed(joined.one(), probed.many());
  }

  /** The values a claim's update of an existing row sets, judged on the row as it was. */
  private record Sets(String attempts, String leaseUntil, String expiresAt, String lastError) {}

  private static Keyed claimKeyed(
      String table,
      String status,
      String leaseUntil,
      Sets sets,
      String claimable,
      String settled,
      boolean probe) {
    return keyed(
        rows -> claim(table, status, leaseUntil, sets, claimable, settled, rows, probe),
        "biz_type, biz_key, owner, lease_ms, keep_ms, fingerprint, source, claim_id",
        Type.TEXT,
        Type.TEXT,
        Type.TEXT,
        Type.BIGINT,
        Type.BIGINT,
        Type.TEXT,
        Type.TEXT,
        Type.TEXT);
  }

  private static String claim(
      String table,
      String status,
      String leaseUntil,
      Sets sets,
      String claimable,
      String settled,
      String rows,
      boolean probe) {
    return "WITH r AS (SELECT * FROM "
        + rows
        + "),"
        + " c AS (SELECT d.*, coalesce(d.lease_until >= now(), false) AS lease_live FROM "
        + (probe
            ? "r" + probe(table, "d")
            : table + " d JOIN r ON d.biz_type = r.biz_type AND d.biz_key = r.biz_key")
        + "),"
        + " claimed AS (INSERT INTO "
        + table
        + " AS d (biz_type, biz_key, status, attempts, owner, lease_until, fingerprint, source,"
        + " created_at, updated_at, expires_at, claim_id)"
        + " SELECT r.biz_type, r.biz_key, "
        + status
        + ", 1, r.owner, "
        + leaseUntil
        + ", r.fingerprint, r.source, now(), now(), now() + r.keep_ms * interval '1 millisecond',"
        + " r.claim_id FROM r LEFT JOIN c ON c.biz_type = r.biz_type AND c.biz_key = r.biz_key"
        + " WHERE c.biz_key IS NULL OR NOT ("
        + settled
        + ") ORDER BY "
        + KEY_ORDER
        + " ON CONFLICT (biz_type, biz_key) DO UPDATE SET status = excluded.status,"
        + " attempts = "
        + sets.attempts()
        + ", owner = excluded.owner, lease_until = "
        + sets.leaseUntil()
        + ", claim_id = excluded.claim_id, last_error = "
        + sets.lastError()
        + ", fingerprint = COALESCE(d.fingerprint, excluded.fingerprint), source = excluded.source,"
        + " updated_at = now(), expires_at = "
        + sets.expiresAt()
        + " WHERE "
        + claimable
        + " RETURNING d.biz_type, d.biz_key, d.attempts)"
        + " SELECT r.biz_type, r.biz_key, k.attempts AS claimed, "
        + RECORD_COLUMNS
        + " FROM r LEFT JOIN claimed k ON k.biz_type = r.biz_type AND k.biz_key = r.biz_key"
        + " LEFT JOIN c ON c.biz_type = r.biz_type AND c.biz_key = r.biz_key";
  }

  /** {@code claimOne} after a CTE {@code m} running {@code completeSql}, counted as marked. */
  private static String claimCompleting(String completeSql, String claimOne) {
    String select = " SELECT r.biz_type, r.biz_key, k.attempts AS claimed,";
    if (!claimOne.startsWith("WITH ") || !claimOne.contains(select)) {
      throw new IllegalStateException("The claim statement changed its shape: " + claimOne);
    }
    return "WITH m AS ("
        + completeSql
        + "), "
        + claimOne
            .substring("WITH ".length())
            .replace(select, " SELECT (SELECT count(*) FROM m) AS marked," + select.substring(7));
  }

  /**
   * {@code CROSS JOIN LATERAL} a lookup of the row {@code r} names, aliased {@code alias}: one
   * primary-key probe per row of {@code r}. {@code OFFSET 0} keeps the planner from turning the
   * lookups into a join, which it may plan as a hash join over a sequential scan of the whole table
   * when it has no statistics or planned the statement while the table was empty (a generic plan
   * that the server keeps, however much the table grows). For a single key an index probe is
   * cheaper than a scan even of the empty table PostgreSQL assumes (ten pages), so the plan does
   * not depend on the table's statistics or size.
   */
  private static String probe(String table, String alias) {
    return " CROSS JOIN LATERAL (SELECT * FROM "
        + table
        + " e WHERE e.biz_type = r.biz_type AND e.biz_key = r.biz_key OFFSET 0) "
        + alias;
  }

  /**
   * Writes an outcome, fenced, for rows of (type, key, token{@code errorColumn}) whose record the
   * statement's snapshot holds: binds the retention first, then the rows; answers the keys it
   * wrote. An {@code INSERT ... ON CONFLICT DO UPDATE ... WHERE} rather than an {@code UPDATE ...
   * FROM}: the conflict finds each row through the primary key whatever the planner knows, where an
   * UPDATE joins the table and the rows, which PostgreSQL may plan as a hash join over a sequential
   * scan ({@link #probe}). The {@code WHERE} judges the row as it is now, as an UPDATE's re-check
   * does (a concurrent change included). The insert itself happens only for a record that vanished
   * between the snapshot and the insert, and then writes what {@link #completeVanished} would.
   */
  private static Keyed outcome(
      String table, String status, @Nullable String errorColumn, String condition) {
    String error = errorColumn == null ? "NULL" : "r." + errorColumn;
    return keyed(
        rows ->
            "INSERT INTO "
                + table
                + " AS d (biz_type, biz_key, status, attempts, owner, last_error, created_at,"
                + " updated_at, expires_at, claim_id) SELECT r.biz_type, r.biz_key, "
                + status
                + ", r.token, '"
                + VANISHED_OWNER
                + "', "
                + error
                + ", now(), now(), now() + ?::bigint * interval '1 millisecond', r.claim_id FROM "
                + rows
                + probe(table, "x")
                + " ORDER BY "
                + KEY_ORDER
                + " ON CONFLICT (biz_type, biz_key) DO UPDATE SET status = excluded.status,"
                + " lease_until = NULL, last_error = "
                + keepingReleaseNote("d.last_error", "excluded.last_error")
                + ", updated_at = now(),"
                + " expires_at = excluded.expires_at"
                // As completeSet: a SUCCESS on a takeover given back takes its holder's claim id.
                + (status.equals("'SUCCESS'")
                    ? ", claim_id = COALESCE(d.claim_id, excluded.claim_id)"
                    : "")
                + " WHERE d.attempts = excluded.attempts AND "
                + ownRow("excluded.claim_id")
                + " AND "
                + condition
                + " RETURNING d.biz_type, d.biz_key",
        outcomeColumns(errorColumn),
        outcomeTypes(errorColumn));
  }

  /**
   * An INSERT of an outcome for rows of (type, key, token, claim id{@code , errorColumn}) with no
   * record.
   */
  private static Keyed vanished(String table, String status, @Nullable String errorColumn) {
    return keyed(
        rows ->
            "INSERT INTO "
                + table
                + " AS d (biz_type, biz_key, status, attempts, owner, last_error, created_at,"
                + " updated_at, expires_at, claim_id) SELECT r.biz_type, r.biz_key, "
                + status
                + ", r.token, '"
                + VANISHED_OWNER
                + "', "
                + (errorColumn == null ? "NULL" : "r." + errorColumn)
                + ", now(), now(), now() + ?::bigint * interval '1 millisecond', r.claim_id FROM "
                + rows
                // The record found in place may be this very outcome, written again by another
                // thread of the holder (the outcome writer and a redelivery's claim both writing
                // a kept outcome): the conflict waits for that insert and then sees it. Counted as
                // written rather than left to a claim anew, whose own claim id it would carry.
                + " ON CONFLICT (biz_type, biz_key) DO UPDATE SET updated_at = d.updated_at"
                + " WHERE d.status = EXCLUDED.status AND d.attempts = EXCLUDED.attempts"
                + " AND d.claim_id = EXCLUDED.claim_id RETURNING d.biz_type, d.biz_key",
        outcomeColumns(errorColumn),
        outcomeTypes(errorColumn));
  }

  /**
   * An UPDATE of the rows that (type, key, token, claim id{@code , extraColumn}) rows still hold:
   * binds the values of {@code set} first, then the rows; answers the keys it updated.
   */
  private static Keyed fenced(
      String table, String set, @Nullable String extraColumn, String condition) {
    return keyed(
        rows ->
            "UPDATE "
                + table
                + " AS d SET "
                + set
                + " FROM "
                + rows
                + " WHERE d.biz_type = r.biz_type AND d.biz_key = r.biz_key"
                + " AND d.attempts = r.token AND "
                + ownRow("r.claim_id")
                + " AND "
                + condition
                + " RETURNING d.biz_type, d.biz_key",
        outcomeColumns(extraColumn),
        outcomeTypes(extraColumn));
  }

  /** The columns of an outcome's rows: the claim's, then the error of a failure. */
  private static String outcomeColumns(@Nullable String errorColumn) {
    return "biz_type, biz_key, token, claim_id" + (errorColumn == null ? "" : ", " + errorColumn);
  }

  private static Type[] outcomeTypes(@Nullable String errorColumn) {
    return errorColumn == null
        ? new Type[] {Type.TEXT, Type.TEXT, Type.INT, Type.TEXT}
        : new Type[] {Type.TEXT, Type.TEXT, Type.INT, Type.TEXT, Type.TEXT};
  }

  /**
   * The {@code last_error} a fenced FAILED writes: {@code written}, unless the row is FAILED under
   * an operator's release (its note in {@code current}). The released holder's late FAILED matches
   * its attempt and claim id, and its handler's error overwrote the note saying who released the
   * key and why; the holder's error is in its own log.
   */
  static String keepingReleaseNote(String current, String written) {
    return "CASE WHEN d.status = 'FAILED' AND "
        + current
        + " LIKE '"
        + io.consumerdedup.core.internal.LeaseLoss.RELEASE_NOTE_PREFIX
        + "%' THEN "
        + current
        + " ELSE "
        + written
        + " END";
  }

  /**
   * The note a claim writes as it takes over the expired lease of the row {@code d} (before the
   * update: its attempt, claim id, owner and last error), as {@link TakeoverNote#of} writes it, cut
   * by characters as it does. A row written before claim ids names none: no claim completes on it.
   */
  private static String takeoverNote() {
    return "LEFT('"
        + TakeoverNote.BEFORE_ATTEMPT
        + "' || d.attempts || '"
        + TakeoverNote.BEFORE_CLAIM
        + "' || COALESCE(d.claim_id, '') || '"
        + TakeoverNote.BEFORE_OWNER
        + "' || d.owner || '"
        + TakeoverNote.END
        + "' || COALESCE('"
        + TakeoverNote.BEFORE_PREVIOUS_ERROR
        + "' || d.last_error, ''), "
        + StoredText.MAX_ERROR_LENGTH
        + ")";
  }

  /**
   * Whether the row {@code d} is FAILED because a claim that took over the expired lease of the
   * claim {@code claimId} (as the statement binds it) was given back unrun ({@link
   * #releaseRestore}: no claim id, the takeover's note kept), rather than by the attempt's own
   * FAILED, a failed later attempt or an operator's release, which overwrite the note. Nothing ran
   * the handler after that claim, whose holder may still be running: its SUCCESS is the key's
   * outcome, where refused, the next delivery applied the handler's effect again. The claim id, not
   * only the attempt: a claim of the key anew after its record vanished has attempt 1 too.
   */
  private static String givenBack(String claimId) {
    String prefix =
        "('"
            + TakeoverNote.BEFORE_ATTEMPT
            + "' || d.attempts || '"
            + TakeoverNote.BEFORE_CLAIM
            + "' || "
            + claimId
            + " || '"
            + TakeoverNote.BEFORE_OWNER
            + "')";
    return "(d.status = 'FAILED' AND d.claim_id IS NULL AND LEFT(d.last_error, char_length("
        + prefix
        + ")) = "
        + prefix
        + ")";
  }

  /**
   * Whether the row {@code d} is the claim's whose id is {@code claimId}, its token compared apart:
   * written by that claim, or settled with no claim id ({@link Dialect.FencedUpdate#FAIL} says
   * which rows those are), which no holder holds.
   */
  private static String ownRow(String claimId) {
    return "(d.claim_id = " + claimId + " OR (d.claim_id IS NULL AND d.status <> 'PROCESSING'))";
  }
}
