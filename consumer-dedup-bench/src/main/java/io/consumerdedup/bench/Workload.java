package io.consumerdedup.bench;

import static java.nio.charset.StandardCharsets.UTF_8;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;

/**
 * The messages every variant consumes, produced once to one topic before any variant runs: values
 * of a fixed size, spread round-robin over the partitions, each with its business key in the
 * {@value #ORDER_NO_HEADER} header; a share of them repeat an earlier key (a producer retry, a
 * provider's repeated callback), at another offset.
 *
 * @param topic the topic holding the messages
 * @param partitions its number of partitions
 * @param messages how many messages it holds
 * @param distinctKeys how many distinct business keys they carry
 * @param valueBytes the size of each value
 */
public record Workload(
    String topic, int partitions, int messages, int distinctKeys, int valueBytes) {

  /** The header that carries the business key. */
  public static final String ORDER_NO_HEADER = "order-no";

  /** Messages that repeat the key of another message. */
  public int duplicates() {
    return messages - distinctKeys;
  }

  /**
   * Creates {@code topic} on {@code broker} and produces the messages to it, waiting until the
   * broker has all of them.
   *
   * @param duplicateRate the share of messages that repeat an earlier key, from 0 to below 1
   * @param seed makes the keys and their order the same from run to run
   * @throws ExecutionException if the topic could not be created
   * @throws IllegalStateException if a message could not be produced
   */
  static Workload produce(
      BenchBroker broker,
      String topic,
      int partitions,
      int messages,
      double duplicateRate,
      int valueBytes,
      long seed)
      throws ExecutionException, InterruptedException {
    List<String> orderNumbers = orderNumbers(messages, duplicateRate, new Random(seed));
    broker.createTopic(topic, partitions);
    AtomicReference<Exception> firstFailure = new AtomicReference<>();
    try (KafkaProducer<String, String> producer = broker.producer()) {
      for (int i = 0; i < messages; i++) {
        String orderNo = orderNumbers.get(i);
        ProducerRecord<String, String> record =
            new ProducerRecord<>(topic, i % partitions, null, value(orderNo, valueBytes));
        record.headers().add(ORDER_NO_HEADER, orderNo.getBytes(UTF_8));
        producer.send(
            record,
            (metadata, exception) -> {
              if (exception != null) {
                firstFailure.compareAndSet(null, exception);
              }
            });
      }
      producer.flush();
    }
    if (firstFailure.get() != null) {
      throw new IllegalStateException(
          "Could not produce the workload to " + topic, firstFailure.get());
    }
    int distinct = (int) orderNumbers.stream().distinct().count();
    return new Workload(topic, partitions, messages, distinct, valueBytes);
  }

  /** The business key of a message of the workload. */
  public static String orderNo(ConsumerRecord<?, ?> record) {
    Header header = record.headers().lastHeader(ORDER_NO_HEADER);
    if (header == null) {
      throw new IllegalStateException(
          "No " + ORDER_NO_HEADER + " header on " + record.topic() + "@" + record.offset());
    }
    return new String(header.value(), UTF_8);
  }

  /** The order number of the {@code index}th distinct key, such as {@code order-000000042}. */
  static String orderNo(int index) {
    return String.format("order-%09d", index);
  }

  /** The index of an order number made by {@link #orderNo(int)}. */
  static int orderIndex(String orderNo) {
    return Integer.parseInt(orderNo.substring("order-".length()));
  }

  /** Distinct keys first, then duplicates of random ones among them, all shuffled. */
  private static List<String> orderNumbers(int messages, double duplicateRate, Random random) {
    if (messages < 1 || duplicateRate < 0 || duplicateRate >= 1) {
      throw new IllegalArgumentException(
          "Need at least one message and a duplicate rate from 0 to below 1, got "
              + messages
              + " and "
              + duplicateRate);
    }
    int distinct = messages - (int) Math.round(messages * duplicateRate);
    List<String> keys = new ArrayList<>(messages);
    for (int i = 0; i < distinct; i++) {
      keys.add(orderNo(i));
    }
    while (keys.size() < messages) {
      keys.add(keys.get(random.nextInt(distinct)));
    }
    Collections.shuffle(keys, random);
    return keys;
  }

  /** A message's value: its order number, then filler up to {@code valueBytes}. */
  static String value(String orderNo, int valueBytes) {
    StringBuilder value = new StringBuilder(valueBytes).append(orderNo).append(':');
    while (value.length() < valueBytes) {
      value.append('x');
    }
    value.setLength(valueBytes);
    return value.toString();
  }
}
