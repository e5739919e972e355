package io.consumerdedup.spring.internal;

import java.util.ArrayList;
import java.util.List;
import org.jspecify.annotations.Nullable;
import org.springframework.transaction.support.TransactionSynchronization;
import org.springframework.transaction.support.TransactionSynchronizationManager;

/**
 * What became of the transaction a listener in mode SEPARATE runs in when the listener method is
 * called ({@code @Transactional} on it), seen from within that transaction's advice. The claim and
 * the outcome stand outside the advice, where only the method's return or exception arrives, and
 * neither tells the transaction's end:
 *
 * <ul>
 *   <li>a transaction marked rollback-only ({@code
 *       TransactionAspectSupport.currentTransactionStatus().setRollbackOnly()}) rolls back and the
 *       method returns normally: recorded SUCCESS, its work undone, a later copy of the key was
 *       skipped as a duplicate and never applied;
 *   <li>a synchronization's {@code afterCommit} that throws (a hook of the application's own) is
 *       passed on to the caller of a method whose transaction committed: recorded FAILED, the error
 *       handler's retry applied the committed effects a second time.
 * </ul>
 *
 * <p>One watch per listener call, on the calling thread: {@link #callStarts} before the call,
 * {@link #watchCurrentTransaction} within the transaction advice, {@link #callEnded} after.
 */
public final class OwnTransactionWatch {
  private static final ThreadLocal<@Nullable OwnTransactionWatch> CALLING = new ThreadLocal<>();

  private final @Nullable OwnTransactionWatch enclosing;
  private boolean reached;
  private boolean returned;
  private boolean committedAfterReturning;
  private @Nullable Throwable rollback;

  /** Whether the watched transaction is open; guarded by this watch, read from other threads. */
  private boolean transactionOpen;

  private final List<Runnable> afterCommit = new ArrayList<>();

  private OwnTransactionWatch(@Nullable OwnTransactionWatch enclosing) {
    this.enclosing = enclosing;
  }

  /** A listener method is about to be called on this thread, its outcome written outside. */
  public static OwnTransactionWatch callStarts() {
    OwnTransactionWatch watch = new OwnTransactionWatch(CALLING.get());
    CALLING.set(watch);
    return watch;
  }

  /** The call returned or threw. */
  public void callEnded() {
    if (enclosing == null) {
      CALLING.remove();
    } else {
      CALLING.set(enclosing);
    }
  }

  /**
   * Called within the transaction advice of the listener method whose call {@link #callStarts}
   * announced: watches the transaction active there, if any.
   *
   * @return the watch, to be told {@link #methodReturned} when the method returns normally; null if
   *     no call awaits one, or no transaction synchronizes on this thread
   */
  public static @Nullable OwnTransactionWatch watchCurrentTransaction() {
    OwnTransactionWatch watch = reached();
    if (watch == null || !TransactionSynchronizationManager.isSynchronizationActive()) {
      return null;
    }
    synchronized (watch) {
      watch.transactionOpen = true;
    }
    TransactionSynchronizationManager.registerSynchronization(
        new TransactionSynchronization() {
          @Override
          public void afterCompletion(int status) {
            List<Runnable> due;
            synchronized (watch) {
              watch.transactionOpen = false;
              due = status == STATUS_COMMITTED ? List.copyOf(watch.afterCommit) : List.of();
              watch.afterCommit.clear();
            }
            due.forEach(Runnable::run);
            if (status == STATUS_COMMITTED) {
              watch.committedAfterReturning = watch.returned;
            } else if (watch.rollback == null) {
              watch.rollback =
                  new IllegalStateException(
                      status == STATUS_ROLLED_BACK
                          ? "marked rollback-only, it ended without an exception"
                          : "its outcome is unknown");
            }
          }
        });
    return watch;
  }

  /**
   * Called within the transaction advice of the listener method whose call {@link #callStarts}
   * announced: its transaction is open.
   *
   * @return the watch of the call, null if none awaits it
   */
  public static @Nullable OwnTransactionWatch reached() {
    OwnTransactionWatch watch = CALLING.get();
    if (watch == null) {
      return null;
    }
    CALLING.remove(); // once per call: what the method calls in turn is not its transaction
    watch.reached = true;
    return watch;
  }

  /**
   * Whether the call got past its transaction advice: false when that advice threw first, as when
   * the transaction could not be opened.
   */
  public boolean reachedWithinTransaction() {
    return reached;
  }

  /**
   * Runs {@code action} once the watched transaction has committed, if it is open now: for what
   * another thread does under it while the method runs (an acknowledgment from a send's callback),
   * which cannot register a synchronization of that transaction itself. Never run if it rolls back.
   *
   * @return false if no watched transaction is open: {@code action} is not kept
   */
  public synchronized boolean runAfterCommit(Runnable action) {
    if (!transactionOpen) {
      return false;
    }
    afterCommit.add(action);
    return true;
  }

  /** The listener method returned normally, within the transaction watched. */
  public void methodReturned() {
    returned = true;
  }

  /**
   * Why the call's work did not commit, although the call returned normally; null if it committed,
   * or no transaction was watched.
   */
  public @Nullable Throwable rollback() {
    return rollback;
  }

  /**
   * Whether the method returned normally and its transaction then committed: what the call threw
   * came from past the commit, its effects committed.
   */
  public boolean committedAfterReturning() {
    return committedAfterReturning;
  }
}
