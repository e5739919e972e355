package io.consumerdedup.spring;

import io.consumerdedup.spring.internal.OwnTransactionWatch;
import java.time.Duration;
import org.jspecify.annotations.Nullable;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.transaction.support.TransactionSynchronization;
import org.springframework.transaction.support.TransactionSynchronizationManager;

/**
 * An {@link Idempotent} batch listener's {@link Acknowledgment}, held until the outcomes are
 * written, so that no offset is committed past a record whose SUCCESS is not recorded; indexes are
 * translated from the list the method was given to the container's batch. What the method
 * acknowledges is done by its own word: the SUCCESS of those records is written at once, in the
 * background, so a process that dies later in the batch runs only the records after them again.
 * Acknowledged inside a transaction (the method's own {@code @Transactional} one, or one it opened)
 * in mode SEPARATE, their SUCCESS is written once that transaction has committed: a rollback undoes
 * their effects, and their keys must be left to the redelivery. (Batch listeners in mode
 * TRANSACTIONAL are refused before they run.)
 */
final class HeldBatchAcknowledgment implements Acknowledgment {
  private final Acknowledgment delegate;
  private final KeptBatchRecords kept;

  private boolean acknowledged;
  private int partialIndex = -1;
  private int markedUpTo = -1;
  private int nackIndex = -1;
  private Duration nackSleep = Duration.ZERO;

  /**
   * The batch ended with every outcome written: what the method acknowledges from now on (from
   * another thread, once its own sends are confirmed, as ack mode MANUAL allows) goes straight to
   * the container. Held as before, it was dropped, and nothing was committed for the batch.
   */
  private boolean released;

  /**
   * The method returned or threw: the outcomes of its records are being written as it left them,
   * and a nack from now on could not bring a record again. Taken, it was dropped without a word:
   * the record the application wanted again was SUCCESS and committed.
   */
  private boolean callEnded;

  /** The method's call, whose own transaction an acknowledgment from another thread is under. */
  private volatile @Nullable OwnTransactionWatch call;

  HeldBatchAcknowledgment(Acknowledgment delegate, KeptBatchRecords kept) {
    this.delegate = delegate;
    this.kept = kept;
  }

  @Override
  public synchronized void acknowledge() {
    if (released) {
      delegate.acknowledge();
      return;
    }
    acknowledged = true;
    markUpTo(kept.size() - 1);
  }

  @Override
  public synchronized void acknowledge(int index) {
    checkIndex(index);
    if (released) {
      delegate.acknowledge(kept.batchIndexes.get(index));
      return;
    }
    partialIndex = Math.max(partialIndex, index);
    markUpTo(index);
  }

  /** A listener acknowledging each record in turn starts each mark once, not the list again. */
  private void markUpTo(int index) {
    int from = markedUpTo + 1;
    markedUpTo = Math.max(markedUpTo, index);
    if (from > index) {
      return;
    }
    // An actual transaction only: a scope without one (propagation SUPPORTS) undoes nothing, and a
    // record it acknowledged is done, whatever the method does next.
    if (TransactionSynchronizationManager.isSynchronizationActive()
        && TransactionSynchronizationManager.isActualTransactionActive()) {
      // The transaction the method acknowledged in may still roll back and undo these records'
      // effects: SUCCESS written now stood, the error handler's redelivery skipped them as
      // duplicates, and they were never applied. Rolled back, they are left to the end of the
      // batch, which records them FAILED with the method's failure.
      TransactionSynchronizationManager.registerSynchronization(
          new TransactionSynchronization() {
            @Override
            public void afterCommit() {
              startCommitted(from, index + 1);
            }
          });
      return;
    }
    // From another thread (a send's callback) while the method's own transaction is open on its
    // thread: no transaction here, yet the records' effects are in that one. Started at once, their
    // SUCCESS stood through its rollback, and the retry skipped them: never applied.
    OwnTransactionWatch watch = call;
    if (watch != null && watch.runAfterCommit(() -> startCommitted(from, index + 1))) {
      return;
    }
    kept.startMarks(from, index + 1);
  }

  /** The method returned or threw: a nack from now on is refused. */
  synchronized void callEnds() {
    callEnded = true;
  }

  /** The method is about to be called, watched by {@code watch}. */
  void callStarts(OwnTransactionWatch watch) {
    call = watch;
  }

  /**
   * Starts the marks of records whose transaction committed. What starting them throws (an {@code
   * OutOfMemoryError}) is not passed on: from {@code afterCommit} it would fail the method's call
   * although its effects are committed, and every record would be recorded FAILED and applied
   * again; a mark not started is started again when the batch ends, whose failure to write it stops
   * the batch there to retry later.
   */
  private void startCommitted(int from, int end) {
    try {
      kept.startMarks(from, end);
    } catch (RuntimeException | Error notStarted) {
      // Left to the end of the batch (above).
    }
  }

  @Override
  public void nack(Duration sleep) {
    nack(0, sleep);
  }

  @Override
  public synchronized void nack(int index, Duration sleep) {
    checkIndex(index);
    if (callEnded) {
      // As spring-kafka refuses a nack it can no longer honour.
      throw new IllegalStateException(
          "nack("
              + index
              + ") after the @Idempotent batch listener returned: the batch's outcomes are"
              + " written as the listener left them, and the record does not come again. Nack"
              + " before returning, or throw a BatchListenerFailedException");
    }
    nackIndex = index;
    nackSleep = sleep;
  }

  private void checkIndex(int index) {
    if (index < 0 || index >= kept.size()) {
      throw new IllegalArgumentException(
          "index " + index + " is outside the batch of " + kept.size() + " records");
    }
  }

  @Override
  public boolean isOutOfOrderCommit() {
    return delegate.isOutOfOrderCommit();
  }

  /** The index, in the list the method was given, of the record it nacked at; -1 if none. */
  synchronized int nackIndex() {
    return nackIndex;
  }

  /** Passes on the method's nack, at {@code batchIndex} of the container's batch. */
  synchronized void nackAt(int batchIndex) {
    delegate.nack(batchIndex, nackSleep);
  }

  /** Every outcome is written: passes on what the listener acknowledged. */
  synchronized void release() {
    released = true;
    if (acknowledged) {
      delegate.acknowledge();
    } else if (partialIndex >= 0) {
      delegate.acknowledge(kept.batchIndexes.get(partialIndex));
    }
  }
}
