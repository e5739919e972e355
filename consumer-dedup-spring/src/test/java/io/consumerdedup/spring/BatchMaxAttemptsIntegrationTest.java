package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.deadLetterReason;
import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.readTopic;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.IdempotentExecutor;
import java.time.Duration;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.BatchListenerFailedException;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * {@code consumer-dedup.max-attempts=3} for a batch listener that always fails at one record (a
 * {@code BatchListenerFailedException} naming it), with an error handler that would deliver it ten
 * times: its attempts are counted in the dedup table across a restart of the consumer, and the
 * other records of the batch are applied once.
 */
@SpringBootTest(
    classes = BatchMaxAttemptsIntegrationTest.App.class,
    properties = "consumer-dedup.max-attempts=3")
@DirtiesContext
@ExtendWith(OutputCaptureExtension.class)
class BatchMaxAttemptsIntegrationTest {
  /** Per key, how often the listener was given its record. */
  static final Counts<String> calls = new Counts<>();

  static final Duration WAIT = Duration.ofSeconds(60);
  static final String TOPIC = "batch-max-attempts";

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_batch_max_attempts", TOPIC, TOPIC + "-dlt");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;
  @Autowired IdempotentExecutors executors;
  @Autowired KafkaListenerEndpointRegistry registry;

  @Test
  void aRecordTheBatchAlwaysFailsAtRunsThreeTimesAcrossARestartAndTheOthersOnce(
      CapturedOutput output) throws Exception {
    // Its three attempts were spent before (the dead letter lost in a crash): given up unrun.
    IdempotentExecutor executor = executors.defaultExecutor();
    DedupKey spent = DedupKey.of("batch-declined", "B-SPENT");
    for (int i = 1; i <= 3; i++) {
      executor.claim(spent, null, null).fail(new IllegalStateException("the bank said no " + i));
    }
    MessageListenerContainer container = registry.getListenerContainer(TOPIC);
    container.stop();
    send(template, TOPIC, "charge 1", "order-no", "B-1");
    send(template, TOPIC, "always declined", "order-no", "B-FAIL");
    send(template, TOPIC, "charge 2", "order-no", "B-2");
    send(template, TOPIC, "charge 3", "order-no", "B-SPENT");
    send(template, TOPIC, "charge 4", "order-no", "B-3");
    container.start();

    DedupKey failing = DedupKey.of("batch-declined", "B-FAIL");
    await()
        .atMost(WAIT)
        .until(() -> calls.of("B-FAIL") == 2 && status(failing) == DedupStatus.FAILED);
    container.stop(); // within the error handler's 5 s back-off: a restart of the consumer
    container.start();

    List<ConsumerRecord<String, String>> deadLetters = readTopic(TOPIC + "-dlt", 2, WAIT);
    assertThat(deadLetters)
        .extracting(record -> header(record, "order-no"))
        .containsExactly("B-FAIL", "B-SPENT");
    assertThat(deadLetterReason(deadLetters.get(0)))
        .contains("DedupAttemptsExhaustedException", "Gave up after 3 failed attempts of at most 3")
        .contains("declined at call 3");
    assertThat(deadLetterReason(deadLetters.get(1)))
        .contains("DedupAttemptsExhaustedException", "the bank said no 3");
    await().atMost(WAIT).until(() -> committed() == 5);

    assertThat(calls.of("B-FAIL")).as("listener runs for B-FAIL, across the restart").isEqualTo(3);
    assertThat(calls.of("B-SPENT")).isZero();
    for (String key : List.of("B-1", "B-2", "B-3")) {
      assertThat(SpringTestEnvironment.effects(jdbc, TOPIC, key)).as(key).isEqualTo(1);
    }
    DedupRecord failed = store.find(failing).orElseThrow();
    assertThat(failed.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(failed.attempts()).isEqualTo(3);
    assertThat(store.find(spent).orElseThrow().attempts()).isEqualTo(3);
    List<String> lines = output.getAll().lines().toList();
    for (int attempt = 1; attempt <= 3; attempt++) {
      String expected = "key batch-declined/B-FAIL, attempt " + attempt + " of 3";
      String cause = "declined at call " + attempt;
      assertThat(lines)
          .filteredOn(line -> line.contains(expected))
          .as("WARN line of attempt %d", attempt)
          .singleElement()
          .satisfies(line -> assertThat(line).contains("WARN", cause));
    }
  }

  private DedupStatus status(DedupKey key) {
    return store.find(key).map(DedupRecord::status).orElse(null);
  }

  private static long committed() throws Exception {
    return SpringTestEnvironment.committed(TOPIC, TOPIC, 0);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    /** Ten deliveries in memory, five seconds apart, then the dead-letter topic. */
    @Bean
    DefaultErrorHandler errorHandler(KafkaTemplate<Object, Object> template) {
      return SpringTestEnvironment.deadLettering(template, 5_000, 9);
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

    @Idempotent(bizType = "batch-declined", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, batch = "true")
    public void charge(List<ConsumerRecord<String, String>> records) {
      for (int i = 0; i < records.size(); i++) {
        ConsumerRecord<String, String> record = records.get(i);
        String key = header(record, "order-no");
        int call = calls.count(key);
        if (key.equals("B-FAIL")) {
          throw new BatchListenerFailedException(
              "declined", new IllegalStateException("declined at call " + call), i);
        }
        SpringTestEnvironment.effect(jdbc, TOPIC, key, record.value());
      }
    }
  }
}
