package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.jdbc.internal.KeysetPurge;
import io.consumerdedup.testing.PlanningTable;
import io.consumerdedup.testing.TestDatabase;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Instant;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The janitor's batches, its backlog count and the one-shot purge, run by the store, read the table
 * along the {@code created_at} index and delete through the primary key on a table of 100k rows
 * that was never analyzed, or whose statements the store's connection planned while it was empty.
 * Counted by PostgreSQL itself ({@code pg_stat_user_tables}): no sequential scan. Without the
 * planner settings the store sends with each of them, a batch after the cursor was planned there as
 * a sequential scan and a sort of the whole table. The settings hold for the purge's statement
 * only: the connection goes back to the pool with the server's own.
 */
class PurgeWithoutStatisticsTest {
  private static final int ROWS = 100_000;
  private static final int BATCH = 1_000;

  private PlanningTable table;
  private HikariDataSource pool;
  private JdbcDedupStore store;

  @BeforeEach
  void setUp() throws SQLException {
    table = new PlanningTable("purgestats");
    // One connection: the store's statements are planned, and cached, in one session.
    pool = TestDatabase.dataSource(table.schema(), 1);
    store = JdbcDedupStore.builder(pool).build();
  }

  @AfterEach
  void tearDown() throws SQLException {
    try {
      pool.close();
    } finally {
      table.close();
    }
  }

  @Test
  void onATableNeverAnalyzedThePurgeScansNoWholeTable() throws SQLException {
    grow();
    assertThat(table.statistics()).as("the table has no planner statistics").isZero();

    purgeByIndex();
  }

  @Test
  void statementsPlannedWhileTheTableWasEmptyStillWalkTheIndexOnceItHasGrown() throws SQLException {
    KeysetPurge keyset = new KeysetPurge(store.calls());
    KeysetPurge.Position somewhere = new KeysetPurge.Position(Instant.EPOCH, "order", "k");
    // More often than pgjdbc takes to name a statement and the server to keep a generic plan.
    for (int i = 0; i < 12; i++) {
      assertThat(keyset.deleteAfter(null, BATCH).deleted()).isZero();
      assertThat(keyset.deleteAfter(somewhere, BATCH).deleted()).isZero();
      assertThat(keyset.estimate().expiredRows()).isZero();
      assertThat(store.purge(BATCH)).isZero();
    }
    grow();

    purgeByIndex();
  }

  /**
   * Three batches of the janitor (the first from the start, the next ones after the cursor), its
   * backlog count and a one-shot purge: no sequential scan, every row deleted found.
   */
  private void purgeByIndex() throws SQLException {
    DedupJanitor janitor = DedupJanitor.builder(store).batchSize(BATCH).maxBatchesPerRun(3).build();
    long before = table.scans(pool).sequential();

    assertThat(janitor.purgeExpired()).as("rows the janitor deleted").isEqualTo(3 * BATCH);
    assertThat(janitor.measureBacklog().orElseThrow().expiredRows())
        .as("expired rows among the oldest")
        .isPositive();
    assertThat(store.purge(BATCH)).as("rows the one-shot purge deleted").isEqualTo(BATCH);

    assertThat(table.scans(pool).sequential() - before)
        .as("sequential scans of the table")
        .isZero();
    try (Connection storeConnection = pool.getConnection();
        Statement statement = storeConnection.createStatement();
        ResultSet row =
            statement.executeQuery(
                "SELECT current_setting('enable_seqscan'), current_setting('enable_sort')")) {
      row.next();
      assertThat(row.getString(1) + " " + row.getString(2))
          .as("the store's connection after the purge")
          .isEqualTo("on on");
    }
    assertThat(count()).as("rows left").isEqualTo(ROWS - 4 * BATCH);
  }

  /** Fills the table with {@link #ROWS} rows spread over two weeks, never analyzed. */
  private void grow() throws SQLException {
    table.addRowsCreatedOverTwoWeeks(0, ROWS, ROWS);
  }

  /** Read only at the end: this scans the table. */
  private long count() throws SQLException {
    try (Statement statement = table.connection().createStatement();
        ResultSet row = statement.executeQuery("SELECT count(*) FROM consumer_dedup")) {
      row.next();
      return row.getLong(1);
    }
  }
}
