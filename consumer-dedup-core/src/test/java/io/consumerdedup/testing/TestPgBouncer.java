package io.consumerdedup.testing;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Locale;
import java.util.UUID;
import org.junit.jupiter.api.Assumptions;
import org.postgresql.PGConnection;

/**
 * A real PgBouncer in transaction pool mode in front of a PostgreSQL server, named by {@code
 * DEDUP_TEST_PGBOUNCER_URL} (CI's {@code .ci/run} starts one with {@code .ci/pgbouncer}). Without
 * it the tests fail under CI ({@code CI=true}) and are skipped elsewhere, with a message that says
 * how to start one.
 *
 * <p>The URL is the one a user writes (no {@code prepareThreshold}). A pooler in transaction mode
 * keeps no session state, so the tests' tables are named with their schema ({@code
 * schema.consumer_dedup}) rather than chosen by {@code currentSchema}.
 */
public final class TestPgBouncer {
  public static final String URL_VARIABLE = "DEDUP_TEST_PGBOUNCER_URL";

  private static final String HOW_TO_START =
      "start PgBouncer in transaction pool mode in front of the test database and set "
          + URL_VARIABLE
          + ", e.g. read -r pid dir <<<\"$(.ci/pgbouncer 6439)\"; export "
          + URL_VARIABLE
          + "='jdbc:postgresql://127.0.0.1:6439/test?user=postgres' (stop it with kill $pid)";

  /**
   * For the tests' own set-up: other clients' named statements (the URL a user writes) are left on
   * PgBouncer's server connections, where a named statement of the set-up would meet them.
   */
  public static final String UNNAMED = "prepareThreshold=0";

  private TestPgBouncer() {}

  /**
   * The PgBouncer URL; fails under CI and skips the calling test elsewhere when it is not set.
   *
   * @throws IllegalStateException it is set but does not lead through a pooler to PostgreSQL
   */
  public static String url() {
    String url = System.getenv(URL_VARIABLE);
    if (url == null || url.isBlank()) {
      String message = "No PgBouncer: " + URL_VARIABLE + " is not set; " + HOW_TO_START;
      if ("true".equalsIgnoreCase(System.getenv("CI"))) {
        throw new IllegalStateException(message);
      }
      Assumptions.abort(message);
    }
    try (Connection connection = DriverManager.getConnection(url)) {
      if (!pooled(connection)) {
        throw new IllegalStateException(URL_VARIABLE + " does not lead through a pooler: " + url);
      }
    } catch (SQLException e) {
      throw new IllegalStateException(
          URL_VARIABLE + " is set but does not answer: " + url + "; " + HOW_TO_START, e);
    }
    return url;
  }

  /**
   * The URL of the same database in PgBouncer's statement pool mode ({@code .ci/pgbouncer} serves
   * it as {@code <database>_statement_mode}); skips the calling test, or fails it under CI, when
   * the PgBouncer does not serve it.
   */
  public static String statementModeUrl() {
    String url = url().replaceFirst("(//[^/]+/)([^?]+)", "$1$2_statement_mode");
    try (Connection connection = DriverManager.getConnection(url)) {
      connection.isValid(5);
    } catch (SQLException e) {
      String message =
          "This PgBouncer does not serve the database in statement pool mode at "
              + url
              + "; start it with .ci/pgbouncer";
      if ("true".equalsIgnoreCase(System.getenv("CI"))) {
        throw new IllegalStateException(message, e);
      }
      Assumptions.abort(message);
    }
    return url;
  }

  /** The URL with {@code parameters} ({@code name=value&...}) added. */
  public static String url(String parameters) {
    String url = url();
    return url + (url.contains("?") ? "&" : "?") + parameters;
  }

  /**
   * Whether {@code connection} goes through a pooler: the server process pgjdbc was told of at
   * connect time is not the one that answers.
   */
  public static boolean pooled(Connection connection) throws SQLException {
    try (Statement statement = connection.createStatement();
        ResultSet row = statement.executeQuery("SELECT pg_backend_pid()")) {
      row.next();
      return row.getInt(1) != connection.unwrap(PGConnection.class).getBackendPID();
    }
  }

  /**
   * Creates a fresh schema holding the dedup table, through PgBouncer (one transaction); returns
   * its name. The table is {@code <schema>.consumer_dedup}.
   */
  public static String newSchema(String prefix) {
    String schema =
        (prefix + "_" + UUID.randomUUID().toString().substring(0, 8))
            .toLowerCase(Locale.ROOT)
            .replaceAll("[^a-z0-9_]", "_");
    try (Connection connection = DriverManager.getConnection(url(UNNAMED));
        Statement statement = connection.createStatement()) {
      connection.setAutoCommit(false);
      statement.execute("CREATE SCHEMA " + schema);
      statement.execute("SET LOCAL search_path TO " + schema);
      statement.execute(TestDatabase.schemaDdl());
      connection.commit();
    } catch (SQLException e) {
      throw new IllegalStateException("Could not create test schema " + schema, e);
    }
    return schema;
  }

  /** A pool of {@code maxPoolSize} connections through PgBouncer on the URL a user writes. */
  public static HikariDataSource dataSource(int maxPoolSize) {
    return dataSource(url(), maxPoolSize);
  }

  /** A pool of {@code maxPoolSize} connections on {@code url}. */
  public static HikariDataSource dataSource(String url, int maxPoolSize) {
    HikariConfig config = new HikariConfig();
    config.setJdbcUrl(url);
    config.setMaximumPoolSize(maxPoolSize);
    config.setPoolName("pgbouncer-" + UUID.randomUUID().toString().substring(0, 8));
    return new HikariDataSource(config);
  }

  /** Drops a schema made by {@link #newSchema(String)}. */
  public static void dropSchema(String schema) {
    try (Connection connection = DriverManager.getConnection(url(UNNAMED));
        Statement statement = connection.createStatement()) {
      statement.execute("DROP SCHEMA IF EXISTS " + schema + " CASCADE");
    } catch (SQLException e) {
      throw new IllegalStateException("Could not drop test schema " + schema, e);
    }
  }
}
