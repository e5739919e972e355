package io.consumerdedup.spring;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerInterceptor;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;

/**
 * A Kafka consumer interceptor ({@code interceptor.classes}) counting, per topic, the polls that
 * returned records of it: what one claim statement per poll is measured against.
 */
public final class PollCounter implements ConsumerInterceptor<Object, Object> {
  private static final Map<String, AtomicInteger> POLLS = new ConcurrentHashMap<>();

  /** The polls so far that returned records of {@code topic}. */
  static int polls(String topic) {
    AtomicInteger count = POLLS.get(topic);
    return count == null ? 0 : count.get();
  }

  @Override
  public ConsumerRecords<Object, Object> onConsume(ConsumerRecords<Object, Object> records) {
    records.partitions().stream()
        .map(TopicPartition::topic)
        .distinct()
        .forEach(topic -> POLLS.computeIfAbsent(topic, t -> new AtomicInteger()).incrementAndGet());
    return records;
  }

  @Override
  public void onCommit(Map<TopicPartition, OffsetAndMetadata> offsets) {}

  @Override
  public void close() {}

  @Override
  public void configure(Map<String, ?> configs) {}
}
