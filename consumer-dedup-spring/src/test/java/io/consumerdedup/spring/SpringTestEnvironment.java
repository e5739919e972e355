package io.consumerdedup.spring;

import io.consumerdedup.testing.TestDatabase;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.test.context.DynamicPropertyRegistry;

/**
 * A fresh PostgreSQL schema (dedup table plus an {@code effects} table that listeners write their
 * side effects to) and the shared in-JVM KRaft broker, for one Spring Boot test class.
 */
final class SpringTestEnvironment {
  private SpringTestEnvironment() {}

  /** Creates the schema and topics and points the application at them. */
  static String prepare(DynamicPropertyRegistry registry, String prefix, String... topics) {
    String schema = TestDatabase.newSchema(prefix);
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement()) {
      statement.execute(
          "CREATE TABLE effects (listener text NOT NULL, biz_key text, payload text,"
              + " at timestamptz NOT NULL DEFAULT clock_timestamp())");
    } catch (SQLException e) {
      throw new IllegalStateException(e);
    }
    TestKafka.createTopics(1, topics);
    registry.add("spring.datasource.url", () -> TestDatabase.url(schema));
    registry.add("spring.datasource.hikari.maximum-pool-size", () -> "6");
    registry.add("spring.kafka.bootstrap-servers", TestKafka::bootstrapServers);
    registry.add("spring.kafka.consumer.auto-offset-reset", () -> "earliest");
    registry.add("spring.kafka.consumer.properties.max.poll.interval.ms", () -> "60000");
    registry.add("consumer-dedup.cleanup.enabled", () -> "false");
    return schema;
  }

  static void send(
      KafkaTemplate<String, String> template, String topic, String value, String... headers)
      throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(topic, value);
    for (int i = 0; i < headers.length; i += 2) {
      record.headers().add(headers[i], headers[i + 1].getBytes(StandardCharsets.UTF_8));
    }
    template.send(record).get();
  }

  /** Reads every record of {@code topic} from the beginning, until {@code count} have arrived. */
  static List<ConsumerRecord<String, String>> readTopic(String topic, int count, Duration timeout) {
    List<ConsumerRecord<String, String>> records = new ArrayList<>();
    try (KafkaConsumer<String, String> consumer =
        new KafkaConsumer<>(
            Map.of(
                ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG,
                TestKafka.bootstrapServers(),
                ConsumerConfig.GROUP_ID_CONFIG,
                "reader-" + UUID.randomUUID(),
                ConsumerConfig.AUTO_OFFSET_RESET_CONFIG,
                "earliest"),
            new StringDeserializer(),
            new StringDeserializer())) {
      consumer.subscribe(List.of(topic));
      long deadline = System.nanoTime() + timeout.toNanos();
      while (records.size() < count && System.nanoTime() < deadline) {
        consumer.poll(Duration.ofMillis(200)).forEach(records::add);
      }
    }
    return records;
  }

  static String header(ConsumerRecord<?, ?> record, String name) {
    Header header = record.headers().lastHeader(name);
    return header == null ? "" : new String(header.value(), StandardCharsets.UTF_8);
  }

  /** All the exception headers a DeadLetterPublishingRecoverer writes, in one string. */
  static String deadLetterReason(ConsumerRecord<?, ?> record) {
    StringBuilder reason = new StringBuilder();
    for (Header header : record.headers()) {
      if (header.key().startsWith("kafka_dlt-exception")) {
        reason.append(header.key()).append('=');
        reason.append(new String(header.value(), StandardCharsets.UTF_8)).append('\n');
      }
    }
    return reason.toString();
  }
}
