package io.consumerdedup.faults;

import io.consumerdedup.testing.TcpProxy;
import io.consumerdedup.testing.TestDatabase;
import io.consumerdedup.testing.TestMariaDb;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.List;

/**
 * The database a {@link FaultRun} runs against: where its namespace (a PostgreSQL schema, a MariaDB
 * database) with the shipped dedup table comes from, how its consumers reach it directly and
 * through the fault proxy, and the few pieces of SQL the dialects spell differently. Everything
 * else the run asks the database (the invariants) is SQL both accept.
 */
enum FaultDatabase {
  /** The test PostgreSQL ({@link TestDatabase}). */
  POSTGRES("PostgreSQL") {
    @Override
    String create(String prefix) {
      return TestDatabase.newSchema(prefix);
    }

    @Override
    String url(String namespace) {
      return TestDatabase.url(namespace);
    }

    @Override
    String dedupUrl(String namespace, TcpProxy via) {
      String direct = url(namespace);
      // A cancel of a statement whose connection is cut must not wait the driver's 10 s default.
      return (via == null ? direct : via.rewrite(direct))
          + "&cancelSignalTimeout=1&ApplicationName="
          + dedupApplicationName(namespace);
    }

    @Override
    int endDedupSessions(String namespace) {
      try (Connection connection = connect(namespace);
          PreparedStatement end =
              connection.prepareStatement(
                  "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
                      + " WHERE application_name = ?")) {
        end.setString(1, dedupApplicationName(namespace));
        try (ResultSet rs = end.executeQuery()) {
          rs.next();
          return rs.getInt(1);
        }
      } catch (SQLException e) {
        throw new IllegalStateException(e);
      }
    }

    /** The consumers' dedup connections only: the suite's own and the effects' are spared. */
    private String dedupApplicationName(String namespace) {
      return "dedup-" + namespace;
    }

    @Override
    TcpProxy newProxy() {
      return TcpProxy.forPostgres();
    }

    @Override
    void drop(String namespace) {
      TestDatabase.dropSchema(namespace);
    }

    @Override
    List<String> auxiliaryTables() {
      return List.of(
          "CREATE TABLE effects (biz_key text NOT NULL, consumer text NOT NULL,"
              + " at timestamptz NOT NULL DEFAULT clock_timestamp())",
          "CREATE TABLE transient_failures (biz_key text PRIMARY KEY)",
          "CREATE TABLE handler_runs (run_id text PRIMARY KEY, biz_key text NOT NULL,"
              + " consumer text NOT NULL, delivery int NOT NULL, started_ms bigint NOT NULL,"
              + " ended_ms bigint)");
    }

    @Override
    String now() {
      return "now()";
    }

    @Override
    String epochMillis(String timestamp) {
      return "(extract(epoch FROM " + timestamp + ") * 1000)::bigint";
    }
  },

  /**
   * The test MariaDB ({@link TestMariaDb}, through MariaDB Connector/J): skipped with a message
   * when {@code DEDUP_TEST_MARIADB_URL} is not set and no local server answers, failed when it is
   * set and the server does not answer.
   */
  MARIADB("MariaDB") {
    @Override
    String create(String prefix) {
      return TestMariaDb.newDatabase(prefix);
    }

    @Override
    String url(String namespace) {
      return TestMariaDb.url(namespace, TestMariaDb.Driver.MARIADB);
    }

    @Override
    String dedupUrl(String namespace, TcpProxy via) {
      if (via == null) {
        return url(namespace);
      }
      String server = TestMariaDb.baseUrl().replaceFirst("//[^/?]*", "//127.0.0.1:" + via.port());
      return TestMariaDb.url(server, namespace, TestMariaDb.Driver.MARIADB);
    }

    @Override
    TcpProxy newProxy() {
      String base = TestMariaDb.baseUrl();
      String rest = base.substring(base.indexOf("//") + 2);
      String authority = rest.split("[/?]", 2)[0];
      int colon = authority.lastIndexOf(':');
      return colon < 0
          ? TcpProxy.start(authority, MARIADB_DEFAULT_PORT)
          : TcpProxy.start(
              authority.substring(0, colon), Integer.parseInt(authority.substring(colon + 1)));
    }

    @Override
    void drop(String namespace) {
      TestMariaDb.dropDatabase(namespace);
    }

    @Override
    List<String> auxiliaryTables() {
      // Keys as the dedup table holds them (their UTF-8 bytes), so they compare exactly with it.
      return List.of(
          "CREATE TABLE effects (biz_key VARBINARY(12000) NOT NULL, consumer VARCHAR(128) NOT NULL,"
              + " at DATETIME(6) NOT NULL DEFAULT UTC_TIMESTAMP(6))",
          "CREATE TABLE transient_failures (biz_key VARBINARY(1024) PRIMARY KEY)",
          "CREATE TABLE handler_runs (run_id VARCHAR(64) PRIMARY KEY, biz_key VARBINARY(12000)"
              + " NOT NULL, consumer VARCHAR(128) NOT NULL, delivery INT NOT NULL,"
              + " started_ms BIGINT NOT NULL, ended_ms BIGINT)");
    }

    @Override
    String now() {
      // The store writes leases in UTC from the database clock.
      return "UTC_TIMESTAMP(6)";
    }

    @Override
    String epochMillis(String timestamp) {
      // The times are UTC (the store's and the effects' defaults), whatever the session's zone.
      return "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', " + timestamp + ") DIV 1000)";
    }
  };

  final String displayName;

  FaultDatabase(String displayName) {
    this.displayName = displayName;
  }

  private static final int MARIADB_DEFAULT_PORT = 3306;

  /** Creates a namespace of its own holding the dedup table from the shipped schema file. */
  abstract String create(String prefix);

  /** A JDBC URL on {@code namespace}, straight to the server. */
  abstract String url(String namespace);

  /** The URL a consumer's dedup pool uses: through {@code via} if not null. */
  abstract String dedupUrl(String namespace, TcpProxy via);

  /** A new proxy in front of the server, in pass mode. */
  abstract TcpProxy newProxy();

  abstract void drop(String namespace);

  /** The DDL of the run's {@code effects} (no unique key) and {@code transient_failures}. */
  abstract List<String> auxiliaryTables();

  /** The database's clock, as the store reads it for leases. */
  abstract String now();

  /** SQL for a timestamp column or expression as milliseconds since the epoch (a bigint). */
  abstract String epochMillis(String timestamp);

  /**
   * Has the server end every session of the consumers' dedup pools on {@code namespace} (as an
   * administrator or a failover does); returns how many it ended. PostgreSQL only ({@code
   * pg_terminate_backend}, filtered by the pools' {@code application_name}).
   */
  int endDedupSessions(String namespace) {
    throw new UnsupportedOperationException(displayName + ": sessions are cut by the proxy only");
  }

  Connection connect(String namespace) throws SQLException {
    return DriverManager.getConnection(url(namespace));
  }
}
