package io.consumerdedup.spring.internal;

import io.consumerdedup.jdbc.internal.AbortedTransactions;
import org.springframework.jdbc.datasource.ConnectionHolder;
import org.springframework.transaction.support.TransactionSynchronization;
import org.springframework.transaction.support.TransactionSynchronizationManager;

/**
 * Refuses to commit a database transaction that a mode TRANSACTIONAL claim joined and that the
 * database has already aborted: a listener that caught the failure of one of its statements returns
 * normally, but PostgreSQL aborted the transaction at that statement, and pgjdbc's commit of it
 * returns normally having committed nothing, neither the writes nor the dedup row, while the
 * container passes the record. Thrown from the commit, the transaction is rolled back and the
 * listener's failure goes to the error handler (or the after-rollback processor), which retries it.
 */
public final class AbortedTransactionCheck implements TransactionSynchronization {
  private AbortedTransactionCheck() {}

  /** Has the current transaction checked before its commit, once however many claims join it. */
  public static void register() {
    if (!TransactionSynchronizationManager.isSynchronizationActive()
        || TransactionSynchronizationManager.getSynchronizations().stream()
            .anyMatch(AbortedTransactionCheck.class::isInstance)) {
      return;
    }
    TransactionSynchronizationManager.registerSynchronization(new AbortedTransactionCheck());
  }

  @Override
  public void beforeCommit(boolean readOnly) {
    for (Object resource : TransactionSynchronizationManager.getResourceMap().values()) {
      if (resource instanceof ConnectionHolder held && aborted(held)) {
        throw new IllegalStateException(
            "The database aborted the transaction before the listener returned: a statement of"
                + " the listener failed and its exception was caught instead of thrown, so"
                + " nothing of the transaction, the dedup row included, could commit. It is"
                + " rolled back as the listener's failure; let the statement's failure end the"
                + " listener, or run the statement under a savepoint");
      }
    }
  }

  private static boolean aborted(ConnectionHolder held) {
    try {
      return AbortedTransactions.aborted(held.getConnection());
    } catch (RuntimeException noConnection) {
      return false; // a holder without a connection has nothing to commit
    }
  }
}
