package io.consumerdedup.jdbc.internal;

import java.util.Collections;

/**
 * The retention purge's statements, for one validated table name and one dialect. Rows go oldest
 * first along the {@code created_at} index, ordered by (created_at, biz_type, biz_key) so that a
 * position in that order is a keyset cursor: each batch starts after the last row the previous one
 * deleted and never walks again over the index entries of rows already deleted (they stay in the
 * index until a vacuum, and a batch that started at the head of the index would step over all of
 * them). An expired row is one whose expires_at has passed and that is not PROCESSING under a live
 * lease.
 *
 * <p>A batch may also stop at a horizon: rows created no earlier than the shortest retention the
 * table's writers use before now. Every writer sets expires_at to the database's now at its write
 * plus a retention, and created_at is the database's now at the row's first insert, never later
 * than any of those writes: a row created after the horizon cannot have expired yet. Without it,
 * the batch that finds the last expired row walks on over every unexpired row to the end of the
 * index, a heap fetch each (expires_at is not in the index): at volume, longer than a statement
 * timeout.
 */
public final class PurgeSql {
  /** Rows at the head of the index the backlog estimate reads, at most. */
  public static final int BACKLOG_SAMPLE = 100_000;

  private static final String AFTER =
      " AND created_at >= ? AND (created_at > ? OR (created_at = ? AND (biz_type > ?"
          + " OR (biz_type = ? AND biz_key > ?))))";
  private static final String ORDER = " ORDER BY created_at, biz_type, biz_key";

  private final boolean postgres;
  private final String table;
  private final String expired;
  private final String beforeHorizon;

  private final String backlogFrom;
  private final String backlogOfRows;

  public PurgeSql(String table, boolean postgres) {
    this.postgres = postgres;
    this.table = table;
    String now = postgres ? "now()" : "UTC_TIMESTAMP(6)";
    expired =
        " WHERE expires_at < " + now + " AND (status <> 'PROCESSING' OR lease_until < " + now + ")";
    // Database time, as the writers' expires_at: the application's clock plays no part.
    beforeHorizon =
        postgres
            ? " AND created_at < now() - ?::bigint * interval '1 millisecond'"
            : " AND created_at < UTC_TIMESTAMP(6) - INTERVAL (? * 1000) MICROSECOND";
    backlogFrom =
        "SELECT count(*) AS expired, "
            + (postgres
                ? "(extract(epoch FROM now() - min(expires_at)) * 1000)::bigint"
                : "TIMESTAMPDIFF(MICROSECOND, min(expires_at), UTC_TIMESTAMP(6)) DIV 1000")
            + " AS oldest_ms FROM (SELECT expires_at, status,"
            + " lease_until FROM "
            + table;
    backlogOfRows = " ORDER BY created_at LIMIT ?) head" + expired;
  }

  /**
   * The count of expired rows ({@code expired}) among the {@value #BACKLOG_SAMPLE} oldest by
   * created_at, and how long ago the first of them expired ({@code oldest_ms}, database time; null
   * when none), binding the shortest retention when {@code beforeHorizon} (the rows created after
   * the horizon, none of them expired, are not read), then that limit. The purge works from that
   * end, so that is where its backlog is.
   */
  public String backlog(boolean beforeHorizon) {
    return backlogFrom
        + (beforeHorizon ? " WHERE" + this.beforeHorizon.substring(" AND".length()) : "")
        + backlogOfRows;
  }

  /**
   * PostgreSQL: deletes the next batch of expired rows and answers one row, the last one deleted,
   * with the count ({@code deleted}, {@code created_at}, {@code biz_type}, {@code biz_key}); no row
   * when nothing was deleted. Binds the shortest retention in milliseconds when {@code
   * beforeHorizon}, the cursor's (created_at three times, biz_type twice, biz_key) when {@code
   * afterCursor}, then the limit. SKIP LOCKED lets many janitors purge at once without waiting on
   * each other or on a claim.
   */
  public String deleteBatch(boolean afterCursor, boolean beforeHorizon) {
    requireDialect(true);
    return "WITH batch AS (SELECT biz_type, biz_key FROM "
        + expiredRows(afterCursor, beforeHorizon)
        + ORDER
        + " LIMIT ? FOR UPDATE SKIP LOCKED), deleted AS (DELETE FROM "
        + table
        + " d USING batch b WHERE d.biz_type = b.biz_type AND d.biz_key = b.biz_key"
        + " RETURNING d.created_at, d.biz_type, d.biz_key)"
        + " SELECT count(*) OVER () AS deleted, created_at, biz_type, biz_key FROM deleted"
        + " ORDER BY created_at DESC, biz_type DESC, biz_key DESC LIMIT 1";
  }

  /**
   * MySQL, first statement: the positions of the next batch of expired rows, binding the shortest
   * retention and the cursor as {@link #deleteBatch} does, then the limit. A plain read, which
   * takes no lock.
   */
  public String selectBatch(boolean afterCursor, boolean beforeHorizon) {
    requireDialect(false);
    return "SELECT created_at, biz_type, biz_key FROM "
        + expiredRows(afterCursor, beforeHorizon)
        + ORDER
        + " LIMIT ?";
  }

  /**
   * MySQL, second statement, in the transaction of the third: locks those of {@code rows} rows,
   * each bound as (type, key), that are still expired, and answers their keys; a row another
   * transaction holds is skipped (a claim, a mode TRANSACTIONAL handler's transaction, another
   * janitor). One primary-key lookup per row, joined by {@code UNION ALL}, locks those rows and no
   * others: a DELETE of a range of the {@code created_at} index locks every row it scans (under
   * REPEATABLE READ, those it keeps too) and waits for each one another transaction holds, where
   * MySQL has no SKIP LOCKED for a DELETE. Expiry is judged again under the lock: a row claimed
   * again since the first statement stays.
   */
  public String lockExpired(int rows) {
    requireDialect(false);
    String one =
        "(SELECT biz_type, biz_key FROM "
            + table
            + expired
            + " AND biz_type = ? AND biz_key = ? FOR UPDATE SKIP LOCKED)";
    return rows == 1
        ? one.substring(1, one.length() - 1)
        : String.join(" UNION ALL ", Collections.nCopies(rows, one));
  }

  /**
   * MySQL, third statement: deletes one row that {@link #lockExpired} locked, binding (type, key).
   */
  public String deleteLocked() {
    requireDialect(false);
    return "DELETE FROM " + table + " WHERE biz_type = ? AND biz_key = ?";
  }

  /**
   * The table, restricted to its expired rows, created before the horizon when {@code
   * beforeHorizon}, after the cursor when {@code afterCursor}.
   */
  private String expiredRows(boolean afterCursor, boolean beforeHorizon) {
    return table + expired + (beforeHorizon ? this.beforeHorizon : "") + (afterCursor ? AFTER : "");
  }

  private void requireDialect(boolean expectPostgres) {
    if (postgres != expectPostgres) {
      throw new IllegalStateException("Statement of the other dialect");
    }
  }
}
