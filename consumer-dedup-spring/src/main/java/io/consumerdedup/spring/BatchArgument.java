package io.consumerdedup.spring;

import io.consumerdedup.spring.internal.CurrentBatch;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.common.TopicPartition;
import org.jspecify.annotations.Nullable;
import org.springframework.messaging.Message;

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
    List<ConsumerRecord<Object, Object>> records = CurrentBatch.records();
    if (records == null || records.size() != elements.size()) {
      throw new IllegalStateException(
          "@Idempotent batch listener "
              + listener
              + " takes List<Message<?>>, but "
              + (records == null
                  ? "its container does not run consumer-dedup's batch interceptor (the"
                      + " auto-configuration adds it to every listener container; for a"
                      + " container made by hand call DedupContainers.configure(container))"
                  : "its container handed over "
                      + records.size()
                      + " records for "
                      + elements.size()
                      + " messages")
              + ": take List<ConsumerRecord<K, V>> instead");
    }
    return records;
  }
}
