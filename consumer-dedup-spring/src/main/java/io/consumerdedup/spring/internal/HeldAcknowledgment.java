package io.consumerdedup.spring.internal;

import java.time.Duration;
import java.util.Objects;
import java.util.function.Consumer;
import org.jspecify.annotations.Nullable;
import org.springframework.kafka.support.Acknowledgment;

/**
 * A record listener's {@link Acknowledgment}, as the listener sees it, for an {@code @Idempotent}
 * listener and for one behind consumer-dedup's record interceptor alike. An acknowledgment is
 * passed on only once released (the listener returned and its outcome is settled), and dropped if
 * the listener threw or nacked the record: spring-kafka keeps an acknowledgment it was given, and
 * commits it before its error handler seeks the record back, or (in a Kafka transaction) outside
 * any transaction before its next poll, past a record whose key is FAILED and that a stop or a
 * rebalance before its retry lost. One made after the release (an asynchronous listener's, a send's
 * callback) goes through as it comes; in a Kafka transaction only once that transaction has
 * committed, never if it did not. A nack the container accepts leaves the key FAILED (the record
 * comes back, and must run again); one it refuses (off the consumer thread, or of an asynchronous
 * listener) leaves the key to the listener's outcome.
 */
public final class HeldAcknowledgment implements Acknowledgment {
  private final Acknowledgment delegate;
  private final Consumer<Throwable> rollBack;
  private final ListenerOutcomes.@Nullable Pending kafkaTransaction;

  private boolean acknowledged;
  private boolean nacked;
  private boolean released;

  /**
   * @param rollBack what a nack the container accepted tells consumer-dedup: the record's outcome
   *     rolled back
   * @param kafkaTransaction the record's claim when the listener runs in a Kafka transaction of its
   *     container, whose commit may still fail after the release; null otherwise
   */
  public HeldAcknowledgment(
      Acknowledgment delegate,
      Consumer<Throwable> rollBack,
      ListenerOutcomes.@Nullable Pending kafkaTransaction) {
    this.delegate = Objects.requireNonNull(delegate, "delegate");
    this.rollBack = Objects.requireNonNull(rollBack, "rollBack");
    this.kafkaTransaction = kafkaTransaction;
  }

  @Override
  public void acknowledge() {
    synchronized (this) {
      if (!released) {
        acknowledged = true;
        return;
      }
    }
    if (kafkaTransaction != null) {
      kafkaTransaction.whenSucceeded(delegate::acknowledge);
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
    rollBack.accept(new IllegalStateException("the listener nacked the record"));
  }

  @Override
  public boolean isOutOfOrderCommit() {
    return delegate.isOutOfOrderCommit();
  }

  /**
   * The listener returned and its outcome is settled: passes on what it acknowledged, unless it
   * also nacked the record (acknowledged first, then nacked): spring-kafka commits what was
   * acknowledged before it seeks a nacked record back, past a record whose key is FAILED.
   */
  public void release() {
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
