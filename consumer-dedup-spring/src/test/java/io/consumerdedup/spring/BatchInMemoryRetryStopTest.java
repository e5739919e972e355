package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
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
 * A batch listener throws an exception of its own once (no record named), so spring-kafka's {@code
 * DefaultErrorHandler} retries the whole batch in memory; the retry gets further and stops at a
 * record consumer-dedup cannot handle (here one without its key header, dead-lettered at once). The
 * delegate's batch retry would end by giving up the whole batch: the records after the stop, never
 * handed to the method, must not be dead-lettered and committed with it. A real PostgreSQL and the
 * in-JVM broker.
 */
@SpringBootTest(classes = BatchInMemoryRetryStopTest.App.class)
@DirtiesContext
class BatchInMemoryRetryStopTest {
  static final Duration WAIT = Duration.ofSeconds(15);
  static final String TOPIC = "bm-retry-stop";
  static final AtomicInteger calls = new AtomicInteger();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_batch_retry_stop", TOPIC, TOPIC + "-dlt");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired KafkaListenerEndpointRegistry registry;

  @Test
  void recordsAfterARecordTheRetryStoppedAtAreAppliedNotGivenUpWithTheBatch() throws Exception {
    send(template, TOPIC, "a", "order-no", "s-1");
    send(template, TOPIC, "no key");
    send(template, TOPIC, "c", "order-no", "s-3");
    registry.getListenerContainer(TOPIC).start(); // one poll brings the three of them

    await().atMost(WAIT).until(() -> committed() == 3);
    List<ConsumerRecord<String, String>> deadLetters =
        SpringTestEnvironment.readTopic(TOPIC + "-dlt", 3, Duration.ofSeconds(3));
    assertThat(deadLetters)
        .extracting(ConsumerRecord::value)
        .as("dead letters")
        .containsExactly("no key");
    assertThat(effects("s-1")).as("s-1 applied").isEqualTo(1);
    assertThat(effects("s-3")).as("s-3, after the record without a key, applied").isEqualTo(1);
  }

  private long committed() throws Exception {
    return SpringTestEnvironment.committed(TOPIC, TOPIC, 0);
  }

  private int effects(String bizKey) {
    return SpringTestEnvironment.effects(jdbc, "batch-retry-stop", bizKey);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    /** Two quick in-memory retries, then the dead-letter topic. */
    @Bean
    DefaultErrorHandler errorHandler(KafkaTemplate<Object, Object> template) {
      return SpringTestEnvironment.deadLettering(template, 0, 2);
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

    @Idempotent(bizType = "batch-retry-stop", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, batch = "true", autoStartup = "false")
    public void charge(List<ConsumerRecord<String, String>> records) {
      if (calls.incrementAndGet() == 1) {
        throw new IllegalStateException("the listener's own failure, once");
      }
      for (ConsumerRecord<String, String> record : records) {
        SpringTestEnvironment.effect(
            jdbc, "batch-retry-stop", header(record, "order-no"), record.value());
      }
    }
  }
}
