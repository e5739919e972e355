package io.consumerdedup.kafka;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.errors.RecordDeserializationException;

/**
 * Receives the records that {@link DedupPollLoop} gives up on: a key that is missing, malformed or
 * in conflict, data the store refuses (not retryable), a handler that failed on every attempt, and
 * (through {@link #deadLetterUndeserializable}) a record whose key or value cannot be deserialized.
 * The loop commits past the record only after this returns, so an implementation must have stored
 * the record durably by then; {@link KafkaDeadLetterPublisher} sends it to {@code <topic>-dlt} and
 * waits for the broker's acknowledgement.
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

  /**
   * Stores or forwards a record whose key or value the consumer's deserializer rejected: the loop
   * has only its bytes, so it cannot be passed to {@link #deadLetter}. A redelivery would fail the
   * same way, so the loop dead-letters it at once and moves past it once this returns.
   *
   * <p>The default throws, so that a handler written before this method existed never lets the loop
   * skip such a record: the loop holds the partition at the record (other partitions keep moving),
   * logs at ERROR, and tries again after the hold back-off, until this method is implemented.
   * {@link KafkaDeadLetterPublisher} implements it when given a {@code rawProducer}.
   *
   * @param record the record's raw key and value bytes (null when absent), headers, timestamp,
   *     topic, partition and offset
   * @param reason the consumer's {@link RecordDeserializationException}; its origin says whether
   *     the key or the value was rejected, its cause is the deserializer's exception
   * @throws RuntimeException if the record could not be stored; the loop then does not commit past
   *     it, and dead-letters it again after a back-off
   */
  default void deadLetterUndeserializable(ConsumerRecord<byte[], byte[]> record, Exception reason) {
    throw new UnsupportedOperationException(
        getClass().getName()
            + " cannot dead-letter a record that cannot be deserialized: implement"
            + " DeadLetterHandler.deadLetterUndeserializable, or use a KafkaDeadLetterPublisher"
            + " built with rawProducer(...)");
  }
}
