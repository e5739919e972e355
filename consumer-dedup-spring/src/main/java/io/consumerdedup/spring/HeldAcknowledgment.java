package io.consumerdedup.spring;

import io.consumerdedup.spring.internal.ListenerOutcomes;
import java.time.Duration;
import org.springframework.kafka.support.Acknowledgment;

/**
 * The listener's {@link Acknowledgment}, as the listener sees it: a nack leaves the key FAILED (the
 * record comes back, and must run again); and where the outcome is written before the method
 * returns, an acknowledgment is passed on only once SUCCESS is written, so no offset is committed
 * past a record whose SUCCESS is not recorded.
 */
final class HeldAcknowledgment implements Acknowledgment {
  private final Acknowledgment delegate;
  private final ListenerOutcomes.Pending pending;
  private final boolean holdUntilSettled;
  private boolean acknowledged;
  private boolean released;

  HeldAcknowledgment(
      Acknowledgment delegate, ListenerOutcomes.Pending pending, boolean holdUntilSettled) {
    this.delegate = delegate;
    this.pending = pending;
    this.holdUntilSettled = holdUntilSettled;
  }

  @Override
  public void acknowledge() {
    synchronized (this) {
      if (holdUntilSettled && !released) {
        acknowledged = true;
        return;
      }
    }
    // SUCCESS is written: an acknowledgment after the method returned (asyncAcks) goes through.
    delegate.acknowledge();
  }

  @Override
  public void nack(Duration sleep) {
    pending.rolledBack(new IllegalStateException("the listener nacked the record"));
    delegate.nack(sleep);
  }

  @Override
  public void acknowledge(int index) {
    delegate.acknowledge(index);
  }

  @Override
  public void nack(int index, Duration sleep) {
    pending.rolledBack(new IllegalStateException("the listener nacked the record"));
    delegate.nack(index, sleep);
  }

  @Override
  public boolean isOutOfOrderCommit() {
    return delegate.isOutOfOrderCommit();
  }

  /** SUCCESS is written: passes on an acknowledgment the listener made. */
  void release() {
    boolean pass;
    synchronized (this) {
      released = true;
      pass = acknowledged;
    }
    if (pass) {
      delegate.acknowledge();
    }
  }
}
