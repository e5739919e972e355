package io.consumerdedup.spring.internal;

import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.jdbc.internal.AbortedTransactions;
import java.util.ArrayList;
import java.util.List;
import org.jspecify.annotations.Nullable;
import org.springframework.jdbc.datasource.ConnectionHolder;
import org.springframework.transaction.support.TransactionSynchronization;
import org.springframework.transaction.support.TransactionSynchronizationManager;

/**
 * Refuses to commit a database transaction that a mode TRANSACTIONAL claim joined and that the
 * database has already aborted or rolled back: a listener that caught the failure of one of its
 * statements returns normally, but PostgreSQL aborted the transaction at that statement, and
 * pgjdbc's commit of it returns normally having committed nothing, neither the writes nor the dedup
 * row; InnoDB rolls the whole transaction back at a deadlock, the claim's dedup row with it, and
 * the listener's next statements run in a new transaction whose commit succeeds, the record passed
 * as applied with no dedup row (its outcome is written only after the commit, too late to refuse
 * it). Thrown from the commit, the transaction is rolled back and the listener's failure goes to
 * the error handler (or the after-rollback processor), which retries it.
 */
public final class AbortedTransactionCheck implements TransactionSynchronization {
  private final List<DedupClaim> claims = new ArrayList<>();

  private AbortedTransactionCheck() {}

  /** Has the current transaction checked before its commit, once however many claims join it. */
  public static void register() {
    if (!TransactionSynchronizationManager.isSynchronizationActive() || registered() != null) {
      return;
    }
    TransactionSynchronizationManager.registerSynchronization(new AbortedTransactionCheck());
  }

  /**
   * Has the check of the current transaction, if {@link #register} made one, refuse its commit
   * unless the transaction still holds {@code claim}'s record.
   */
  public static void hold(DedupClaim claim) {
    AbortedTransactionCheck check = registered();
    if (check != null) {
      check.claims.add(claim);
    }
  }

  private static @Nullable AbortedTransactionCheck registered() {
    if (!TransactionSynchronizationManager.isSynchronizationActive()) {
      return null;
    }
    for (TransactionSynchronization synchronization :
        TransactionSynchronizationManager.getSynchronizations()) {
      if (synchronization instanceof AbortedTransactionCheck check) {
        return check;
      }
    }
    return null;
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
    // After the aborted check: on PostgreSQL a read in an aborted transaction fails.
    claims.forEach(DedupClaim::requireHeldBeforeCommit);
  }

  private static boolean aborted(ConnectionHolder held) {
    try {
      return AbortedTransactions.aborted(held.getConnection());
    } catch (RuntimeException noConnection) {
      return false; // a holder without a connection has nothing to commit
    }
  }
}
