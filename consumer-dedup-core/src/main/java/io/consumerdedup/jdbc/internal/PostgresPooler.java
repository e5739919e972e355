package io.consumerdedup.jdbc.internal;

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
