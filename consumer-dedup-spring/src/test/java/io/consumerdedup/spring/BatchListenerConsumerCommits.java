package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import java.time.Duration;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
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
 * A batch listener commits through the consumer it is given ({@code consumer.commitSync()}), then
 * throws: the records of its batch are FAILED, to be retried. Sent as it was made, that commit
 * passed them while their outcomes were not written yet; the container stopped before the retry,
 * and restarted from past them, they never came again. A real PostgreSQL and the in-JVM broker. Run
 * with claims per poll ({@link BatchListenerConsumerCommitTest}) and per record ({@link
 * BatchListenerConsumerCommitClaimsPerRecordTest}): one test, each setting an application of its
 * own.
 */
@DirtiesContext
abstract class BatchListenerConsumerCommits {
  static final Duration WAIT = Duration.ofSeconds(15);
  static final String LISTENER = "batch-consumer-commit";

  /**
   * A topic (and group, the listener's id) for each application: the two subclasses' applications
   * differ by a setting, and neither may see the other's records and offsets.
   */
  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    String topic = "bc-consumer-commit-" + UUID.randomUUID().toString().substring(0, 8);
    SpringTestEnvironment.prepare(registry, "spring_batch_consumer_commit", topic, topic + "-dlt");
    registry.add("test.batch-consumer-commit.topic", () -> topic);
  }

  @Value("${test.batch-consumer-commit.topic}")
  String topic;

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired KafkaListenerEndpointRegistry registry;
  @Autowired Charges charges;

  /** The test, which each subclass runs under a name of its own. */
  void assertACommitInsideAFailingBatchDoesNotPassItsRecords() throws Exception {
    send(template, topic, "a", "order-no", "c-1");
    send(template, topic, "b", "order-no", "c-2");
    registry.getListenerContainer(topic).start(); // one poll brings both

    await().atMost(WAIT).until(() -> status("c-2").equals("FAILED"));
    registry.getListenerContainer(topic).stop(); // during the error handler's back-off
    assertThat(committed()).as("offset committed past the FAILED records").isLessThan(1);

    charges.succeed();
    registry.getListenerContainer(topic).start();
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
    return SpringTestEnvironment.committed(topic, topic, 0);
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

    /** Of this application's listener: each application starts with a failing one. */
    private final AtomicBoolean failing = new AtomicBoolean(true);

    Charges(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    /** A method, not the field: the test is given this bean's proxy. */
    public void succeed() {
      failing.set(false);
    }

    @Idempotent(bizType = LISTENER, header = "order-no")
    @KafkaListener(
        id = "${test.batch-consumer-commit.topic}",
        topics = "${test.batch-consumer-commit.topic}",
        batch = "true",
        autoStartup = "false")
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
