package io.consumerdedup.spring;

import io.consumerdedup.spring.internal.ListenerOutcomes;
import java.time.Duration;
import org.springframework.kafka.support.Acknowledgment;

/**
 * The listener's {@link Acknowledgment}, as the listener sees it: a nack the container accepts
 * leaves the key FAILED (the record comes back, and must run again); a nack it refuses (off the
 * consumer thread, or of an asynchronous listener) leaves the key to the listener's outcome. An
 * acknowledgment is passed on only once released, when SUCCESS is written or the listener's
 * transaction committed, so no offset is committed past a record whose outcome may still be undone.
 * In a Kafka transaction of the container too, where it is released inside that transaction and its
 * offset goes with it: passed on at once, spring-kafka kept it when the listener then threw, and
 * committed it outside any transaction before its next poll, past the record its after-rollback
 * processor had sought back for a retry, which a stop or a rebalance before that retry lost.
 */
final class HeldAcknowledgment implements Acknowledgment {
  private final Acknowledgment delegate;
  private final ListenerOutcomes.Pending pending;

  /** Whether the listener runs in a Kafka transaction of its container, whose commit may fail. */
  private final boolean kafkaTransaction = ListenerOutcomes.inKafkaTransaction();

  private boolean acknowledged;
  private boolean nacked;
  private boolean released;

  HeldAcknowledgment(Acknowledgment delegate, ListenerOutcomes.Pending pending) {
    this.delegate = delegate;
    this.pending = pending;
  }

  @Override
  public void acknowledge() {
    synchronized (this) {
      if (!released) {
        acknowledged = true;
        return;
      }
    }
    // Released: an acknowledgment after the method returned (asyncAcks, a send's callback) goes
    // through; in a Kafka transaction, once that transaction has committed, never if it did not.
    if (kafkaTransaction) {
      pending.whenSucceeded(delegate::acknowledge);
      return;
    }
    delegate.acknowledge();
  }

  @Override
  public void nack(Duration sleep) {
    // First: a nack refused (IllegalStateException) that the listener catches, returning normally,
    // must not leave its applied key FAILED while its offset is committed.
    delegate.nack(sleep);
    nacked();
  }

  @Override
  public void acknowledge(int index) {
    delegate.acknowledge(index);
  }

  @Override
  public void nack(int index, Duration sleep) {
    delegate.nack(index, sleep);
    nacked();
  }

  private void nacked() {
    synchronized (this) {
      nacked = true;
    }
    pending.rolledBack(new IllegalStateException("the listener nacked the record"));
  }

  @Override
  public boolean isOutOfOrderCommit() {
    return delegate.isOutOfOrderCommit();
  }

  /**
   * The outcome is settled: passes on an acknowledgment the listener made, unless it also nacked
   * the record (acknowledged first, then nacked): spring-kafka commits what was acknowledged before
   * it seeks a nacked record back, past a record whose key is FAILED.
   */
  void release() {
    boolean pass;
    synchronized (this) {
      released = true;
      pass = acknowledged && !nacked;
    }
    if (pass) {
      delegate.acknowledge();
    }
  }
}
