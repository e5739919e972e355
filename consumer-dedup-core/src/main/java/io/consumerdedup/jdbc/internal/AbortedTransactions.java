package io.consumerdedup.jdbc.internal;

import java.sql.Connection;
import java.sql.SQLException;
import org.postgresql.core.BaseConnection;
import org.postgresql.core.TransactionState;

/**
 * A transaction the database has already aborted while it is still open on the client: on
 * PostgreSQL, a statement of it failed, whoever caught the failure. pgjdbc's {@code commit()} of
 * such a transaction returns normally, the server having answered {@code ROLLBACK}: nothing of it
 * is committed and nobody is told.
 *
 * <p>Needs pgjdbc (an optional dependency): with another driver nothing is detected. MySQL and
 * MariaDB do not abort a transaction on a failed statement.
 */
public final class AbortedTransactions {
  private AbortedTransactions() {}

  /** Whether the open transaction of {@code connection} can no longer commit. */
  public static boolean aborted(Connection connection) {
    if (!PostgresPooler.PGJDBC) {
      return false;
    }
    try {
      return connection.isWrapperFor(BaseConnection.class)
          && connection.unwrap(BaseConnection.class).getTransactionState()
              == TransactionState.FAILED;
    } catch (SQLException | RuntimeException e) {
      return false; // the commit finds out what state the connection is in
    }
  }
}
