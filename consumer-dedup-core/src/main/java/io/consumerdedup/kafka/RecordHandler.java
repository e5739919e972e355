package io.consumerdedup.kafka;

import org.apache.kafka.clients.consumer.ConsumerRecord;

/** The application's work for one record: the side effect to apply once. */
@FunctionalInterface
public interface RecordHandler<K, V> {
  void handle(ConsumerRecord<K, V> record) throws Exception;
}
