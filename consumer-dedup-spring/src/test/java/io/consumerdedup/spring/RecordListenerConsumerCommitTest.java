package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.effect;
import static io.consumerdedup.spring.SpringTestEnvironment.effects;
import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import java.time.Duration;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A record listener, at Spring Boot's defaults, commits through the consumer it is given ({@code
 * consumer.commitSync()}), then throws: its record is FAILED, and the default error handler retries
 * it at once. The commit must not have passed the record by then: a process dying before the retry
 * would never see it again. A real PostgreSQL and the in-JVM broker.
 */
@SpringBootTest(classes = RecordListenerConsumerCommitTest.App.class)
@DirtiesContext
class RecordListenerConsumerCommitTest {
  static final Duration WAIT = Duration.ofSeconds(20);
  static final String TOPIC = "rl-consumer-commit";
  static final AtomicInteger calls = new AtomicInteger();

  /** The group's committed offset as the retry began; -1 for none. */
  static final AtomicLong committedAtTheRetry = new AtomicLong(Long.MIN_VALUE);

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_record_consumer_commit", TOPIC);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;

  @Test
  void aCommitInsideAFailingRecordListenerDoesNotPassItsRecordBeforeTheRetry() throws Exception {
    send(template, TOPIC, "a", "order-no", "r-1");

    await().atMost(WAIT).until(() -> effects(jdbc, TOPIC, "r-1") == 1);
    assertThat(calls).as("the failed call, then its retry").hasValue(2);
    assertThat(committedAtTheRetry.get())
        .as("offset committed past the FAILED record before its retry")
        .isLessThan(1);
    assertThat(effects(jdbc, TOPIC, "r-1")).as("r-1 applied once").isEqualTo(1);
  }

  static class Charges {
    final JdbcTemplate jdbc;

    Charges(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = TOPIC, header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    public void charge(ConsumerRecord<String, String> record, Consumer<?, ?> consumer) {
      if (calls.incrementAndGet() == 2) {
        TopicPartition partition = new TopicPartition(TOPIC, 0);
        Map<TopicPartition, OffsetAndMetadata> committed =
            consumer.committed(Set.of(partition), Duration.ofSeconds(5));
        OffsetAndMetadata offset = committed.get(partition);
        committedAtTheRetry.set(offset == null ? -1 : offset.offset());
      }
      consumer.commitSync();
      if (calls.get() == 1) {
        throw new IllegalStateException("the listener fails after committing");
      }
      effect(jdbc, TOPIC, header(record, "order-no"), record.value());
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Charges charges(JdbcTemplate jdbc) {
      return new Charges(jdbc);
    }
  }
}
