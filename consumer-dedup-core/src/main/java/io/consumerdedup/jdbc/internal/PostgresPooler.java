package io.consumerdedup.jdbc.internal;

import io.consumerdedup.core.DedupConfigurationException;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import org.postgresql.PGConnection;
import org.postgresql.PGStatement;

/**
 * A connection pooler between the application and PostgreSQL (PgBouncer, pgcat, Supavisor, RDS
 * Proxy). In transaction pool mode it runs each transaction of a client connection on whichever
 * server connection is free, so pgjdbc's named server-side statements (used from a statement's
 * fifth execution on a connection, by default) meet a server connection that lacks them (SQL state
 * 26000), already has one of that name (42P05), or has another statement under that name (08P01 on
 * the parameter count, class 22 on a parameter's type). An unnamed statement is parsed in the same
 * round trip as it runs, so it cannot meet another client's.
 *
 * <p>Needs pgjdbc (an optional dependency): with another driver nothing is detected and statements
 * are left as the driver makes them.
 */
public final class PostgresPooler {
  static final boolean PGJDBC = present("org.postgresql.PGConnection");

  private PostgresPooler() {}

  /**
   * Whether {@code connection} reaches PostgreSQL through a pooler: the server process pgjdbc was
   * told of when it connected is not the one that answers (a pooler makes up its own, and hands the
   * client's work to server connections of its choosing).
   */
  public static boolean detect(Connection connection) throws SQLException {
    if (!PGJDBC || !connection.isWrapperFor(PGConnection.class)) {
      return false;
    }
    int toldAtConnect = connection.unwrap(PGConnection.class).getBackendPID();
    try (Statement statement = connection.createStatement()) {
      useUnnamed(statement);
      try (ResultSet row = statement.executeQuery("SELECT pg_backend_pid()")) {
        return row.next() && row.getInt(1) != toldAtConnect;
      }
    }
  }

  /**
   * Refuses a pooler in statement pool mode (PgBouncer's {@code pool_mode = statement}), which ends
   * a client connection that opens a transaction ({@code FATAL: transaction blocks not allowed in
   * statement pooling mode}, SQL state 08P01, as a lost connection says). The store's claims are
   * single statements and go through it, but a group's renewals and releases, the admin's changes
   * and mode TRANSACTIONAL run in transactions, and would be "unavailable" at every try while the
   * leases they renew run out. Opens and ends a transaction of one SELECT on {@code connection},
   * which must be in auto-commit mode (outside any caller's transaction); a pooler in statement
   * mode closes it then.
   *
   * @throws DedupConfigurationException behind a pooler in statement pool mode
   */
  public static void requireTransactions(Connection connection, String table) throws SQLException {
    PGConnection pgConnection = connection.unwrap(PGConnection.class);
    int threshold = pgConnection.getPrepareThreshold();
    // The BEGIN and COMMIT that pgjdbc sends are named by the connection's threshold, and a
    // named one would meet another client's server connection behind a pooler in transaction mode.
    pgConnection.setPrepareThreshold(0);
    try {
      // Handed back in auto-commit mode with no transaction left open, whatever fails, as a store
      // call's own transaction is.
      StoreCalls.inOwnTransaction(
          connection,
          c -> {
            try (Statement statement = c.createStatement()) {
              useUnnamed(statement);
              return statement.execute("SELECT 1");
            }
          });
    } catch (SQLException refused) {
      if (String.valueOf(refused.getMessage()).contains("statement pooling mode")) {
        throw new DedupConfigurationException(
            "The dedup table "
                + table
                + " is reached through a connection pooler in statement pool mode (PgBouncer's"
                + " pool_mode = statement), which ends every client connection that opens a"
                + " transaction: a group's lease renewals and releases run in one, and would fail"
                + " at every try while the leases of running handlers run out. Serve the store's"
                + " database with pool_mode = transaction (PgBouncer sets it per database in"
                + " [databases], or per user in [users]): "
                + refused.getMessage(),
            null,
            null);
      }
      throw refused;
    } finally {
      try {
        pgConnection.setPrepareThreshold(threshold);
      } catch (RuntimeException e) {
        // Nothing to restore on a connection the pooler closed.
      }
    }
  }

  /** Makes {@code statement} run as an unnamed server-side statement, parsed at each execution. */
  public static void useUnnamed(Statement statement) throws SQLException {
    if (PGJDBC && statement.isWrapperFor(PGStatement.class)) {
      statement.unwrap(PGStatement.class).setPrepareThreshold(0);
    }
  }

  /**
   * Makes every statement of {@code connection} unnamed, the COMMIT and ROLLBACK that pgjdbc sends
   * included (it names those by the connection's threshold); for a connection behind a pooler.
   *
   * @return the threshold to {@linkplain #setPrepareThreshold restore} when done
   */
  public static int unnameStatements(Connection connection) throws SQLException {
    PGConnection pgConnection = connection.unwrap(PGConnection.class);
    int threshold = pgConnection.getPrepareThreshold();
    pgConnection.setPrepareThreshold(0);
    return threshold;
  }

  public static void setPrepareThreshold(Connection connection, int threshold) throws SQLException {
    connection.unwrap(PGConnection.class).setPrepareThreshold(threshold);
  }

  /**
   * Whether statements that the library does not build (a handler's own, on the connection of its
   * transaction) become named server-side statements: the connection's {@code prepareThreshold}, as
   * the JDBC URL or the DataSource set it, is not 0.
   */
  public static boolean namesStatements(Connection connection) throws SQLException {
    return PGJDBC
        && connection.isWrapperFor(PGConnection.class)
        && connection.unwrap(PGConnection.class).getPrepareThreshold() != 0;
  }

  private static boolean present(String className) {
    try {
      Class.forName(className, false, PostgresPooler.class.getClassLoader());
      return true;
    } catch (ClassNotFoundException | LinkageError e) {
      return false;
    }
  }
}
