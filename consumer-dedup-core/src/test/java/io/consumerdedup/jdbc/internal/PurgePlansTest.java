package io.consumerdedup.jdbc.internal;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.testing.PlanningTable;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The retention purge's statements (a batch from the start and after the keyset cursor, the
 * one-shot purge, the backlog estimate) walk the {@code created_at} index and delete through the
 * primary key, whatever the planner knows of the table: never analyzed (autovacuum off), with plans
 * the server kept from while the table was empty, and analyzed; at 1k, 100k and 1M rows. Each is
 * planned as the store runs it, in a transaction that first runs {@link PostgresSql#PURGE_PLANS}.
 * Without those settings the batch after the cursor was planned at 1M rows never analyzed as a
 * sequential scan and a sort of the whole table (278 ms a batch of 1,000 instead of 5), the backlog
 * estimate as well, and the batch's {@code DELETE ... USING} as a hash join at 100k rows analyzed.
 * Read from {@code EXPLAIN}, so no timing.
 */
class PurgePlansTest {
  private static final int[] SIZES = {1_000, 100_000, 1_000_000};
  private static final String CURSOR = "now() - interval '30 days'";

  /**
   * The prefix of the statements whose plans the server may keep from while the table was empty.
   */
  private static final String KEPT = "kept_";

  private static final PurgeSql purge = new PurgeSql("consumer_dedup", true);
  private static final PostgresSql sql = new PostgresSql("consumer_dedup");

  /**
   * The plans on a table never analyzed, by size and statement name: growing a table to a million
   * rows takes most of this class's time, so both tests of such a table read one table's plans,
   * taken as it grows.
   */
  private static final Map<Integer, Map<String, String>> neverAnalyzedPlans = new HashMap<>();

  private static final Map<Integer, Integer> neverAnalyzedStatistics = new HashMap<>();

  @BeforeAll
  static void growATableNeverAnalyzed() throws SQLException {
    try (Table table = new Table()) {
      for (Purge statement : statements("")) {
        table.prepare(statement);
      }
      for (Purge statement : statements(KEPT)) {
        table.prepare(statement);
        // More often than the server plans a statement for its parameters before it may keep a
        // generic plan; rolled back, so the table stays empty.
        for (int i = 0; i < 8; i++) {
          table.inPurgeTransaction(
              () -> {
                table.execute("EXECUTE " + statement.name() + statement.arguments());
                return null;
              });
        }
      }
      for (int size : SIZES) {
        table.growTo(size);
        neverAnalyzedStatistics.put(size, table.statistics());
        Map<String, String> plans = new HashMap<>();
        for (Purge statement : statements("")) {
          plans.put(statement.name(), table.plan(statement));
        }
        for (Purge statement : statements(KEPT)) {
          plans.put(statement.name(), table.plan(statement));
        }
        neverAnalyzedPlans.put(size, plans);
      }
    }
  }

  @Test
  void onATableNeverAnalyzedThePurgeWalksTheIndexAtEverySize() {
    for (int size : SIZES) {
      assertThat(neverAnalyzedStatistics.get(size)).as("the table has no statistics").isZero();
      for (Purge statement : statements("")) {
        assertThat(neverAnalyzedPlans.get(size).get(statement.name()))
            .as("%s at %,d rows", statement.name(), size)
            .satisfies(plan -> walksTheIndex(statement, plan));
      }
    }
  }

  @Test
  void plansKeptFromWhileTheTableWasEmptyStillWalkTheIndexOnceItHasGrown() {
    for (int size : SIZES) {
      for (Purge statement : statements(KEPT)) {
        assertThat(neverAnalyzedPlans.get(size).get(statement.name()))
            .as("%s at %,d rows", statement.name(), size)
            .satisfies(plan -> walksTheIndex(statement, plan));
      }
    }
  }

  @Test
  void onAnAnalyzedTableABatchDeletesByPrimaryKey() throws SQLException {
    try (Table table = new Table()) {
      for (Purge statement : statements("")) {
        table.prepare(statement);
      }
      for (int size : new int[] {1_000, 100_000}) {
        table.growTo(size);
        table.execute("ANALYZE consumer_dedup");
        for (Purge statement : statements("")) {
          assertThat(table.plan(statement))
              .as("%s at %,d rows", statement.name(), size)
              .satisfies(plan -> walksTheIndex(statement, plan));
        }
      }
    }
  }

  private static void walksTheIndex(Purge statement, String plan) {
    assertThat(plan)
        .contains("Index Scan using consumer_dedup_created_idx")
        .doesNotContain("Seq Scan on consumer_dedup")
        .doesNotContain("Bitmap Heap Scan on consumer_dedup")
        .doesNotContainPattern("(Hash|Merge)( \\w+)? Join");
    if (statement.deletes()) {
      assertThat(plan).contains("Index Scan using consumer_dedup_pk");
    }
  }

  /** A purge statement, named for PREPARE, with its arguments as SQL. */
  private record Purge(String name, String text, String arguments, boolean deletes) {}

  /** The purge's statements, named for PREPARE with {@code prefix}. */
  private static List<Purge> statements(String prefix) {
    String position = CURSOR + ", " + CURSOR + ", " + CURSOR + ", 'order', 'order', 'k', 1000)";
    // A day's retention, in milliseconds, as the janitor binds its horizon.
    String day = "86400000, ";
    return List.of(
        new Purge(
            prefix + "batch_after_cursor", purge.deleteBatch(true, false), "(" + position, true),
        new Purge(prefix + "batch_first", purge.deleteBatch(false, false), "(1000)", true),
        new Purge(
            prefix + "horizon_after_cursor",
            purge.deleteBatch(true, true),
            "(" + day + position,
            true),
        new Purge(
            prefix + "horizon_first", purge.deleteBatch(false, true), "(" + day + "1000)", true),
        new Purge(prefix + "purge_oldest", sql.purge, "(1000)", true),
        new Purge(
            prefix + "backlog", purge.backlog(false), "(" + PurgeSql.BACKLOG_SAMPLE + ")", false),
        new Purge(
            prefix + "horizon_backlog",
            purge.backlog(true),
            "(" + day + PurgeSql.BACKLOG_SAMPLE + ")",
            false));
  }

  /** A table of its own whose statements are planned as the store runs them. */
  private static final class Table implements AutoCloseable {
    private final PlanningTable table = new PlanningTable("purgeplans");
    private int rows;

    Table() throws SQLException {}

    @Override
    public void close() throws SQLException {
      table.close();
    }

    private void prepare(Purge statement) throws SQLException {
      table.prepare(statement.name(), statement.text());
    }

    /** The statement's plan, in a transaction as the store runs it. */
    private String plan(Purge statement) throws SQLException {
      return inPurgeTransaction(() -> table.plan(statement.name(), statement.arguments()));
    }

    private interface Work<T> {
      T run() throws SQLException;
    }

    /** Runs {@code work} after the purge's planner settings, in a transaction rolled back. */
    private <T> T inPurgeTransaction(Work<T> work) throws SQLException {
      Connection connection = table.connection();
      connection.setAutoCommit(false);
      try {
        execute(PostgresSql.PURGE_PLANS);
        return work.run();
      } finally {
        connection.rollback();
        connection.setAutoCommit(true);
      }
    }

    /** Adds rows up to {@code size}, spread over two weeks as a table of that size holds them. */
    private void growTo(int size) throws SQLException {
      table.addRowsCreatedOverTwoWeeks(rows, size, size);
      rows = size;
    }

    private int statistics() throws SQLException {
      return table.statistics();
    }

    private void execute(String statementSql) throws SQLException {
      table.execute(statementSql);
    }
  }
}
