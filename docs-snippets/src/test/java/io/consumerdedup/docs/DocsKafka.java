package io.consumerdedup.docs;

import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.jspecify.annotations.Nullable;

/**
 * The snippets name their topic and group as an application does ({@code payments}, {@code
 * billing}), while the test classes of this module share one broker ({@link TestKafka}). So a test
 * of a snippet starts the group at the end of the topic, and sees only the records it sends.
 */
public final class DocsKafka {
  private DocsKafka() {}

  /**
   * Creates {@code topic} (one partition) if needed and commits its end offset for {@code group}.
   */
  public static void startGroupAtEnd(String group, String topic) throws Exception {
    TopicPartition partition = ensureTopic(topic);
    try (Admin admin = admin()) {
      admin
          .alterConsumerGroupOffsets(
              group, Map.of(partition, new OffsetAndMetadata(TestKafka.endOffset(partition))))
          .all()
          .get();
    }
  }

  /** Creates {@code topic} with one partition unless it exists; returns that partition. */
  public static TopicPartition ensureTopic(String topic) throws Exception {
    try (Admin admin = admin()) {
      if (!admin.listTopics().names().get().contains(topic)) {
        TestKafka.createTopics(1, topic);
      }
    }
    return new TopicPartition(topic, 0);
  }

  private static Admin admin() {
    return Admin.create(
        Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, TestKafka.bootstrapServers()));
  }

  /** The offset {@code group} committed on partition 0 of {@code topic}; -1 if none. */
  public static long committed(String group, String topic) {
    return TestKafka.committedOffsets(group).getOrDefault(new TopicPartition(topic, 0), -1L);
  }

  /** Sends a record with the given header names and values; returns its offset. */
  public static long send(String topic, String value, String... headers) throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(topic, value);
    for (int i = 0; i < headers.length; i += 2) {
      record.headers().add(headers[i], headers[i + 1].getBytes(StandardCharsets.UTF_8));
    }
    try (KafkaProducer<String, String> producer = TestKafka.producer()) {
      return producer.send(record).get().offset();
    }
  }

  /** The last value of the header {@code name}, or null. */
  public static @Nullable String header(ConsumerRecord<?, ?> record, String name) {
    Header header = record.headers().lastHeader(name);
    return header == null ? null : new String(header.value(), StandardCharsets.UTF_8);
  }
}
