package io.consumerdedup.kafka;

import org.apache.kafka.clients.consumer.ConsumerRecord;

/**
 * Receives the records that {@link DedupPollLoop} gives up on: a key that is missing, malformed or
 * in conflict (not retryable), or a handler that failed on every attempt. The loop commits past the
 * record only after this returns, so an implementation must have stored the record durably by then;
 * {@link KafkaDeadLetterPublisher} sends it to {@code <topic>.DLT} and waits for the broker's
 * acknowledgement.
 */
@FunctionalInterface
public interface DeadLetterHandler<K, V> {

  /**
   * Stores or forwards a record the loop gives up on.
   *
   * @param record the record, as consumed
   * @param reason why it is dead-lettered: the handler's last exception, or the dedup exception
   * @throws RuntimeException if the record could not be stored; the loop then does not commit past
   *     it, and dead-letters it again after a back-off
   */
  void deadLetter(ConsumerRecord<K, V> record, Exception reason);
}
