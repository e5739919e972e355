package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * As {@link BatchListenerConsumerCommitTest}, with {@code consumer-dedup.claims-per-poll=false}:
 * the containers' consumers are then left as they are, and the consumer the batch listener is given
 * is the container's own. Its commit, made before the listener throws, must still wait for the
 * batch's outcomes: sent at once, it passed the FAILED records, and a stop before their retry lost
 * them. A real PostgreSQL and the in-JVM broker.
 */
@SpringBootTest(
    classes = BatchListenerConsumerCommitClaimsPerRecordTest.App.class,
    properties = "consumer-dedup.claims-per-poll=false")
@DirtiesContext
class BatchListenerConsumerCommitClaimsPerRecordTest {
  static final Duration WAIT = Duration.ofSeconds(15);
  static final String TOPIC = "bc-consumer-commit-per-record";
  static final String LISTENER = "batch-consumer-commit-per-record";
  static final AtomicBoolean failing = new AtomicBoolean(true);

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry, "spring_batch_consumer_commit_pr", TOPIC, TOPIC + "-dlt");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired KafkaListenerEndpointRegistry registry;

  @Test
  void aCommitInsideAFailingBatchDoesNotPassItsRecordsWithClaimsPerRecord() throws Exception {
    send(template, TOPIC, "a", "order-no", "c-1");
    send(template, TOPIC, "b", "order-no", "c-2");
    registry.getListenerContainer(TOPIC).start(); // one poll brings both

    await().atMost(WAIT).until(() -> status("c-2").equals("FAILED"));
    registry.getListenerContainer(TOPIC).stop(); // during the error handler's back-off
    assertThat(committed()).as("offset committed past the FAILED records").isLessThan(1);

    failing.set(false);
    registry.getListenerContainer(TOPIC).start();
    await().atMost(WAIT).until(() -> committed() == 2);
    assertThat(effects("c-1")).as("c-1 applied once").isEqualTo(1);
    assertThat(effects("c-2")).as("c-2 applied once").isEqualTo(1);
    assertThat(status("c-2")).isEqualTo("SUCCESS");
  }

  private String status(String bizKey) {
    List<String> status =
        jdbc.queryForList(
            "SELECT status FROM consumer_dedup WHERE biz_type = ? AND biz_key = ?",
            String.class,
            LISTENER,
            bizKey);
    return status.isEmpty() ? "" : status.get(0);
  }

  private long committed() throws Exception {
    return SpringTestEnvironment.committed(TOPIC, TOPIC, 0);
  }

  private int effects(String bizKey) {
    return SpringTestEnvironment.effects(jdbc, LISTENER, bizKey);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    /** A retry long after the container is stopped. */
    @Bean
    DefaultErrorHandler errorHandler(KafkaTemplate<Object, Object> template) {
      return SpringTestEnvironment.deadLettering(template, 10_000, 2);
    }

    @Bean
    Charges charges(JdbcTemplate jdbc) {
      return new Charges(jdbc);
    }
  }

  static class Charges {
    final JdbcTemplate jdbc;

    Charges(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = LISTENER, header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, batch = "true", autoStartup = "false")
    public void charge(List<ConsumerRecord<String, String>> records, Consumer<?, ?> consumer) {
      consumer.commitSync();
      if (failing.get()) {
        throw new IllegalStateException("the listener fails after committing");
      }
      for (ConsumerRecord<String, String> record : records) {
        SpringTestEnvironment.effect(jdbc, LISTENER, header(record, "order-no"), record.value());
      }
    }
  }
}
