package io.consumerdedup.jdbc.internal;

import java.sql.SQLException;
import java.sql.SQLRecoverableException;
import java.sql.SQLTransientException;
import java.util.Set;

/** Which database errors are worth retrying: the connection, not the statement, was the problem. */
public final class SqlStates {
  private static final Set<String> TRANSIENT =
      Set.of(
          "40001", // serialization_failure
          "40P01", // deadlock_detected
          "57P01", // admin_shutdown (pg_terminate_backend, a restart)
          "57P02", // crash_shutdown
          "57P03", // cannot_connect_now (starting up)
          "53300"); // too_many_connections

  private SqlStates() {}

  public static boolean isTransient(SQLException e) {
    for (SQLException current = e; current != null; current = current.getNextException()) {
      String state = current.getSQLState();
      if (state != null && (state.startsWith("08") || TRANSIENT.contains(state))) {
        return true;
      }
      if (current instanceof SQLTransientException || current instanceof SQLRecoverableException) {
        return true;
      }
    }
    return false;
  }
}
