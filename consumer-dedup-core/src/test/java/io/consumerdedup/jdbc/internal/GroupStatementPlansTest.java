package io.consumerdedup.jdbc.internal;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.testing.PlanningTable;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.Collections;
import java.util.List;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The statements for a group of keys (a poll's claims, a group of SUCCESS marks or failures) find
 * each key through the primary key, whatever the planner knows of the table: on a table that was
 * never analyzed (autovacuum off) and on one whose plans the server cached while it was empty. The
 * earlier {@code UPDATE ... FROM unnest(...)} and the claim's join were planned there as a hash
 * join over a sequential scan of the whole table, every group reading every row (the benchmark's
 * heap run: 1,524 msg/s instead of about 20,000). Read from {@code EXPLAIN}, so no timing. A
 * group's renewals and releases run a statement of one key per key, checked here as well; {@code
 * GroupRenewalsAndReleasesTest} counts the scans of whole groups run by the store.
 */
class GroupStatementPlansTest {
  private static final int GROUP = 500;
  private static final int ROWS = 100_000;
  private static final String ONE_CLAIM = "'order', 'k-0', 'x', 60000, 60000, NULL, 'x', 'x'";

  private final PostgresSql sql = new PostgresSql("consumer_dedup");
  private PlanningTable table;

  @BeforeEach
  void setUp() throws SQLException {
    table = new PlanningTable("plans");
  }

  @AfterEach
  void tearDown() throws SQLException {
    table.close();
  }

  @Test
  void onATableNeverAnalyzedEachKeyOfAGroupIsAnIndexProbe() throws SQLException {
    grow();
    assertThat(table.statistics()).as("the table has no statistics").isZero();

    for (Group group : groups()) {
      prepare(group);
      assertThat(plan(group)).as(group.name()).satisfies(GroupStatementPlansTest::probesIndex);
    }
  }

  @Test
  void plansCachedWhileTheTableWasEmptyStillProbeTheIndexOnceItHasGrown() throws SQLException {
    List<Group> groups = groups();
    for (Group group : groups) {
      prepare(group);
      // Run while the table is empty, more often than the server plans a statement for its
      // parameters before it may keep a generic plan; rolled back, so the table stays empty.
      Connection connection = table.connection();
      connection.setAutoCommit(false);
      for (int i = 0; i < 8; i++) {
        table.execute("EXECUTE " + group.name() + group.arguments());
      }
      connection.rollback();
      connection.setAutoCommit(true);
    }
    grow();

    for (Group group : groups) {
      assertThat(plan(group)).as(group.name()).satisfies(GroupStatementPlansTest::probesIndex);
    }
  }

  private static void probesIndex(String plan) {
    assertThat(plan).doesNotContain("Seq Scan on consumer_dedup").contains("consumer_dedup_pk");
  }

  /** A group statement, its keys half in the grown table and half not, as SQL arguments. */
  private record Group(String name, String text, String arguments) {}

  private List<Group> groups() {
    List<String> keys =
        IntStream.range(0, GROUP)
            .mapToObj(i -> "k-" + (i % 2 == 0 ? i : ROWS + i))
            .collect(Collectors.toList());
    String types = array(Collections.nCopies(GROUP, "order"), "text");
    String keyArray = array(keys, "text");
    String tokens = array(Collections.nCopies(GROUP, "1"), "int");
    String texts = array(Collections.nCopies(GROUP, "x"), "text");
    String millis = array(Collections.nCopies(GROUP, "60000"), "bigint");
    String claims =
        String.join(", ", types, keyArray, texts, millis, millis, texts, texts, texts) + ")";
    return List.of(
        new Group(
            "complete_group",
            sql.complete.many(),
            "(60000, " + String.join(", ", types, keyArray, tokens, texts) + ")"),
        new Group(
            "fail_group",
            sql.fail.many(),
            "(60000, " + String.join(", ", types, keyArray, tokens, texts, texts) + ")"),
        new Group("claim_group", sql.claim.many(), "(" + claims),
        new Group("claim_in_transaction_group", sql.claimInTransaction.many(), "(" + claims),
        // One key (the per-record path): its equality on the primary key is probed as well.
        new Group("complete_one", sql.complete.one(), "(60000, 'order', 'k-0', 1, 'x')"),
        // Renewals and releases are statements of one key, which a group runs as a JDBC batch.
        new Group("renew_one", sql.renew, "(60000, 'order', 'k-0', 1, 'x')"),
        new Group("release_delete_one", sql.releaseDelete, "('order', 'k-0', 1, 'x')"),
        new Group("release_restore_one", sql.releaseRestore, "('order', 'k-2', 2, 'x')"),
        new Group("claim_one", sql.claim.one(), "(" + ONE_CLAIM + ")"),
        new Group(
            "claim_completing_one",
            sql.claimCompleting.one(),
            "(60000, 'order', 'k-2', 1, 'x', " + ONE_CLAIM + ")"));
  }

  private static String array(List<String> values, String type) {
    return "'{" + String.join(",", values) + "}'::" + type + "[]";
  }

  private void prepare(Group group) throws SQLException {
    table.prepare(group.name(), group.text());
  }

  private String plan(Group group) throws SQLException {
    return table.plan(group.name(), group.arguments());
  }

  /** Fills the table with {@link #ROWS} rows, as a grown table holds them, never analyzed. */
  private void grow() throws SQLException {
    table.execute(
        "INSERT INTO consumer_dedup (biz_type, biz_key, status, owner, expires_at)"
            + " SELECT 'order', 'k-' || g, 'SUCCESS', 'consumer-a', now() + interval '7 days'"
            + " FROM generate_series(0, "
            + (ROWS - 1)
            + ") g");
  }
}
