package io.consumerdedup.examples.kafka;

import java.time.Duration;

/** A scenario's consumer, run until it has committed the records the scenario sent. */
public interface ScenarioConsumer extends AutoCloseable {

  /** Why a run of the consumer ended. */
  enum End {
    /** Every record up to the end offset asked for is committed by this consumer. */
    CAUGHT_UP,
    /** A commit was refused: the group took the partition away (this consumer is a zombie). */
    FENCED
  }

  /**
   * Polls until this consumer has committed every record below {@code endOffset} of partition 0, or
   * a commit is refused.
   *
   * @throws IllegalStateException if neither happens within {@code timeout}
   */
  End runUntilCommitted(long endOffset, Duration timeout) throws InterruptedException;

  @Override
  void close();
}
