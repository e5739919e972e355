package io.consumerdedup.spring.internal;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;

/**
 * Where a record is: topic, partition and offset. A record interceptor may hand the listener
 * another object than the one the consumer polled, so records are matched by where they are.
 */
public record Coordinates(String topic, int partition, long offset) {

  public static Coordinates of(ConsumerRecord<?, ?> record) {
    return new Coordinates(record.topic(), record.partition(), record.offset());
  }

  public TopicPartition topicPartition() {
    return new TopicPartition(topic, partition);
  }

  @Override
  public String toString() {
    return topic + "-" + partition + "@" + offset;
  }
}
