package io.consumerdedup.testing;

import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import javax.sql.DataSource;

/**
 * A dedup table in a schema of its own, for tests that read the server's plans of the store's
 * statements. Autovacuum is off for it, so that nothing analyzes the table behind the test's back:
 * it has planner statistics only once the test runs {@code ANALYZE}. One connection, which holds
 * the statements the test prepares.
 */
public final class PlanningTable implements AutoCloseable {
  private final String schema;
  private final Connection connection;

  public PlanningTable(String schemaPrefix) throws SQLException {
    schema = TestDatabase.newSchema(schemaPrefix);
    connection = TestDatabase.connect(schema);
    execute("ALTER TABLE consumer_dedup SET (autovacuum_enabled = false)");
  }

  public String schema() {
    return schema;
  }

  public Connection connection() {
    return connection;
  }

  public void execute(String statementSql) throws SQLException {
    try (Statement statement = connection.createStatement()) {
      statement.execute(statementSql);
    }
  }

  /**
   * Prepares {@code text}, a JDBC statement, server-side under {@code name} ({@code ?} become
   * {@code $n}), so that its plans can be read with {@code EXPLAIN EXECUTE} and the server may keep
   * a generic one, as it does for the driver's named statements.
   */
  public void prepare(String name, String text) throws SQLException {
    StringBuilder numbered = new StringBuilder();
    int parameter = 0;
    for (char c : text.toCharArray()) {
      if (c == '?') {
        numbered.append('$').append(++parameter);
      } else {
        numbered.append(c);
      }
    }
    execute("PREPARE " + name + " AS " + numbered);
  }

  /**
   * The plan of the statement prepared under {@code name} for {@code arguments}, given as SQL in
   * parentheses.
   */
  public String plan(String name, String arguments) throws SQLException {
    List<String> lines = new ArrayList<>();
    try (Statement statement = connection.createStatement();
        ResultSet rows =
            statement.executeQuery("EXPLAIN (COSTS OFF) EXECUTE " + name + arguments)) {
      while (rows.next()) {
        lines.add(rows.getString(1));
      }
    }
    return String.join("\n", lines);
  }

  /** The planner statistics of the table's columns: 0 until the table is analyzed. */
  public int statistics() throws SQLException {
    try (Statement statement = connection.createStatement();
        ResultSet row =
            statement.executeQuery(
                "SELECT count(*) FROM pg_stats WHERE tablename = 'consumer_dedup'"
                    + " AND schemaname = current_schema()")) {
      row.next();
      return row.getInt(1);
    }
  }

  /** A table's sequential and index scans, as counted by the server's statistics. */
  public record Scans(long sequential, long index) {
    public Scans since(Scans before) {
      return new Scans(sequential - before.sequential, index - before.index);
    }
  }

  /**
   * The table's scan counters, with everything the store's connection and this one did so far: a
   * backend reports its counts when it goes idle, at most once a second unless told to report the
   * next time, which it then does before it answers. {@code store} is the store's pool of one
   * connection, the session whose scans count.
   */
  public Scans scans(DataSource store) throws SQLException {
    try (Connection storeConnection = store.getConnection();
        Statement statement = storeConnection.createStatement()) {
      statement.execute("SELECT pg_stat_force_next_flush()");
    }
    execute("SELECT pg_stat_force_next_flush()");
    try (Statement statement = connection.createStatement();
        ResultSet row =
            statement.executeQuery(
                "SELECT seq_scan, idx_scan FROM pg_stat_user_tables"
                    + " WHERE relname = 'consumer_dedup' AND schemaname = current_schema()")) {
      row.next();
      return new Scans(row.getLong(1), row.getLong(2));
    }
  }

  /**
   * Adds the rows {@code k-from} to {@code k-(to - 1)} of a table of {@code size} rows created over
   * the last two weeks in key order and kept seven days (the older half expired), as a grown table
   * holds them.
   */
  public void addRowsCreatedOverTwoWeeks(int from, int to, int size) throws SQLException {
    execute(
        "INSERT INTO consumer_dedup (biz_type, biz_key, status, owner, created_at, expires_at)"
            + " SELECT 'order', 'k-' || g, 'SUCCESS', 'consumer-a', t, t + interval '7 days'"
            + " FROM generate_series("
            + from
            + ", "
            + (to - 1)
            + ") g, LATERAL (SELECT now() - interval '14 days' * (1 - g::float8 / "
            + size
            + ") AS t) created");
  }

  @Override
  public void close() throws SQLException {
    try {
      connection.close();
    } finally {
      TestDatabase.dropSchema(schema);
    }
  }
}
