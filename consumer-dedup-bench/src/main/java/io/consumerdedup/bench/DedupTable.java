package io.consumerdedup.bench;

import java.sql.SQLException;
import java.time.Duration;

/**
 * The harness's own statements on consumer-dedup's table, {@value #NAME}: emptying it, counting it,
 * and filling it fast with generated keys (one {@code INSERT ... SELECT generate_series}), never
 * through the library.
 */
final class DedupTable {
  /** The table's name, as the shipped schema file creates it. */
  static final String NAME = "consumer_dedup";

  /** The biz type every variant of ours deduplicates under. */
  static final String BIZ_TYPE = "order";

  private DedupTable() {}

  static void truncate(BenchDatabase database) throws SQLException {
    database.execute("TRUNCATE " + NAME);
  }

  /**
   * Gathers the table's statistics, as autovacuum does on a server where it runs: a table never
   * analyzed (a server with autovacuum off) leaves the planner guessing, and for a group of a few
   * hundred keys it then scans the whole table instead of probing the primary key. The statistics
   * outlive the variants' {@code TRUNCATE}s, and the planner scales them to the table's size.
   */
  static void analyze(BenchDatabase database) throws SQLException {
    database.execute("ANALYZE " + NAME);
  }

  /** The workload's keys (not the preloaded ones) the table holds as SUCCESS. */
  static long workloadKeysDone(BenchDatabase database) throws SQLException {
    return database.queryForLong(
        "SELECT count(*) FROM "
            + NAME
            + " WHERE biz_type = ? AND status = 'SUCCESS' AND biz_key LIKE 'order-%'",
        BIZ_TYPE);
  }

  static long rows(BenchDatabase database) throws SQLException {
    return database.queryForLong("SELECT count(*) FROM " + NAME);
  }

  /**
   * Inserts {@code count} SUCCESS rows with keys that no message of the workload carries, expiring
   * {@code expiresIn} from now (negative: already expired), then vacuums and analyzes the table, as
   * autovacuum would have done to a table that grew over time.
   */
  static void preload(BenchDatabase database, long count, Duration expiresIn) throws SQLException {
    database.update(
        "INSERT INTO "
            + NAME
            + " (biz_type, biz_key, status, attempts, owner, expires_at)"
            + " SELECT ?, 'preloaded-' || g, 'SUCCESS', 1, 'bench-preload',"
            + " now() + make_interval(secs => ?)"
            + " FROM generate_series(1, ?) g",
        BIZ_TYPE,
        (double) expiresIn.toSeconds(),
        count);
    database.execute("VACUUM (ANALYZE) " + NAME);
  }

  /**
   * Inserts {@code count} SUCCESS rows created evenly over the last two weeks, in that order, each
   * kept seven days after its creation: the older half has expired. Then vacuums and analyzes.
   */
  static void preloadTwoWeeks(BenchDatabase database, long count) throws SQLException {
    database.update(
        "INSERT INTO "
            + NAME
            + " (biz_type, biz_key, status, attempts, owner, created_at, updated_at, expires_at)"
            + " SELECT ?, 'preloaded-' || g, 'SUCCESS', 1, 'bench-preload', t, t,"
            + " t + interval '7 days'"
            + " FROM generate_series(1, ?) g,"
            + " LATERAL (SELECT now() - interval '14 days' * (1 - g::float8 / ?) AS t) created",
        BIZ_TYPE,
        count,
        count);
    database.execute("VACUUM (ANALYZE) " + NAME);
  }

  static long expiredRows(BenchDatabase database) throws SQLException {
    return database.queryForLong("SELECT count(*) FROM " + NAME + " WHERE expires_at < now()");
  }
}
