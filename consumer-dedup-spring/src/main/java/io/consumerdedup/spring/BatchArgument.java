package io.consumerdedup.spring;

import io.consumerdedup.spring.internal.CurrentBatch;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.common.TopicPartition;
import org.jspecify.annotations.Nullable;
import org.springframework.kafka.support.KafkaHeaders;
import org.springframework.messaging.Message;
import org.springframework.messaging.MessageHeaders;

/**
 * The batch argument of an {@link Idempotent} batch listener's call, in one of the forms of {@link
 * ListenerShape.BatchShape}: its elements and the records behind them, in the container's order,
 * and the same form with only the records the listener is to see.
 */
final class BatchArgument {
  private final Object argument;
  final List<Object> elements;
  final List<ConsumerRecord<Object, Object>> records;

  private BatchArgument(
      Object argument, List<Object> elements, List<ConsumerRecord<Object, Object>> records) {
    this.argument = argument;
    this.elements = elements;
    this.records = records;
  }

  /**
   * @throws IllegalStateException the listener takes messages, and the container does not hand over
   *     the records behind them
   */
  static BatchArgument of(IdempotentListenerMethod listener, Object argument) {
    List<Object> elements = elementsOf(argument);
    return new BatchArgument(argument, elements, recordsOf(listener, elements));
  }

  /** {@code #payload} of the i-th record: its message's payload, or its value. */
  @Nullable Object payload(int i) {
    return elements.get(i) instanceof Message<?> message
        ? message.getPayload()
        : records.get(i).value();
  }

  /** The batch argument with only the kept records, in the same form. */
  Object filtered(KeptBatchRecords kept) {
    if (argument instanceof ConsumerRecords<?, ?>) {
      Map<TopicPartition, List<ConsumerRecord<Object, Object>>> byPartition = new LinkedHashMap<>();
      for (ConsumerRecord<Object, Object> record : kept.records) {
        byPartition
            .computeIfAbsent(
                new TopicPartition(record.topic(), record.partition()), p -> new ArrayList<>())
            .add(record);
      }
      return new ConsumerRecords<>(byPartition, Map.of());
    }
    return new ArrayList<>(kept.elements);
  }

  /** The batch argument's elements, in the container's order. */
  @SuppressWarnings("unchecked")
  private static List<Object> elementsOf(Object argument) {
    if (argument instanceof ConsumerRecords<?, ?> consumerRecords) {
      List<Object> elements = new ArrayList<>(consumerRecords.count());
      consumerRecords.forEach(elements::add);
      return elements;
    }
    return new ArrayList<>((List<Object>) argument);
  }

  /**
   * The records behind the elements: the elements themselves, or, for messages, the records the
   * container hands over on this thread, one per message in the same order.
   */
  @SuppressWarnings("unchecked")
  private static List<ConsumerRecord<Object, Object>> recordsOf(
      IdempotentListenerMethod listener, List<Object> elements) {
    if (listener.shape.batch != ListenerShape.BatchShape.MESSAGES) {
      return (List<ConsumerRecord<Object, Object>>) (List<?>) elements;
    }
    List<ConsumerRecord<Object, Object>> polled = CurrentBatch.records();
    // A record filter (@KafkaListener(filter = ...), the factory's RecordFilterStrategy) drops
    // records after the batch interceptor saw them: matched by position, every batch it filtered
    // failed, and its records were never applied. Each message names its own record.
    List<ConsumerRecord<Object, Object>> records =
        polled == null ? null : byCoordinates(polled, elements);
    if (records == null && polled != null && polled.size() == elements.size()) {
      records = polled;
    }
    if (records == null) {
      throw new IllegalStateException(
          "@Idempotent batch listener "
              + listener
              + " takes List<Message<?>>, but "
              + (polled == null
                  ? "its container does not run consumer-dedup's batch interceptor (the"
                      + " auto-configuration adds it to every listener container; for a"
                      + " container made by hand call DedupContainers.configure(container))"
                  : "its container handed over "
                      + polled.size()
                      + " records for "
                      + elements.size()
                      + " messages")
              + ": take List<ConsumerRecord<K, V>> instead");
    }
    return records;
  }

  /**
   * The record of each message, found by the topic, partition and offset its headers carry; null if
   * a message carries none of them or names a record the container did not hand over.
   */
  private static @Nullable List<ConsumerRecord<Object, Object>> byCoordinates(
      List<ConsumerRecord<Object, Object>> polled, List<Object> elements) {
    Map<Coordinates, ConsumerRecord<Object, Object>> byPlace = new HashMap<>();
    for (ConsumerRecord<Object, Object> record : polled) {
      byPlace.put(new Coordinates(record.topic(), record.partition(), record.offset()), record);
    }
    List<ConsumerRecord<Object, Object>> records = new ArrayList<>(elements.size());
    for (Object element : elements) {
      if (!(element instanceof Message<?> message)) {
        return null;
      }
      MessageHeaders headers = message.getHeaders();
      if (!(headers.get(KafkaHeaders.RECEIVED_TOPIC) instanceof String topic)
          || !(headers.get(KafkaHeaders.RECEIVED_PARTITION) instanceof Integer partition)
          || !(headers.get(KafkaHeaders.OFFSET) instanceof Long offset)) {
        return null;
      }
      ConsumerRecord<Object, Object> record =
          byPlace.get(new Coordinates(topic, partition, offset));
      if (record == null) {
        return null;
      }
      records.add(record);
    }
    return records;
  }

  private record Coordinates(String topic, int partition, long offset) {}
}
