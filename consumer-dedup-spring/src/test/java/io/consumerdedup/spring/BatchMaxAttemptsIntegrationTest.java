package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.deadLetterReason;
import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.readTopic;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.IdempotentExecutor;
import java.time.Duration;
import java.util.List;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
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
import org.springframework.kafka.listener.BatchInterceptor;
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
 * other records of the batch are applied once; a record whose last attempt failed, first in the
 * batch after an earlier attempt's failure, is dead-lettered at once.
 */
@SpringBootTest(
    classes = BatchMaxAttemptsIntegrationTest.App.class,
    properties = "consumer-dedup.max-attempts=3")
@DirtiesContext
@ExtendWith(OutputCaptureExtension.class)
class BatchMaxAttemptsIntegrationTest {
  /** Per key, how often the listener was given its record. */
  static final Counts<String> calls = new Counts<>();

  /** Per key, how often the container delivered its record to the batch listener. */
  static final Counts<String> deliveries = new Counts<>();

  static final Duration WAIT = Duration.ofSeconds(60);
  static final String TOPIC = "batch-max-attempts";
  static final String SPENT_FIRST = "batch-spent-first";
  static final String NESTED = "batch-nested";

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry,
        "spring_batch_max_attempts",
        TOPIC,
        TOPIC + "-dlt",
        SPENT_FIRST,
        SPENT_FIRST + "-dlt",
        NESTED);
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

  /**
   * The record fails its second attempt first in a batch, the error handler's back-off begun by its
   * first (its attempt counted before, as by another instance): its last attempt's failure goes to
   * the recoverer at once. It went back to the error handler's back-off instead, which saw the same
   * exception type again: redelivered, its claim given back as spent, until the handler's ten
   * deliveries were used up, five seconds apart, the records behind it waiting.
   */
  @Test
  void aBatchRecordWhoseLastAttemptFailsFirstInTheBatchIsDeadLetteredAtOnce() throws Exception {
    IdempotentExecutor executor = executors.defaultExecutor();
    DedupKey failing = DedupKey.of("batch-spent-first", "S-FAIL");
    executor.claim(failing, null, null).fail(new IllegalStateException("declined before"));
    long start = System.nanoTime();
    send(template, SPENT_FIRST, "always declined", "order-no", "S-FAIL");
    send(template, SPENT_FIRST, "charge 5", "order-no", "S-AFTER");

    // One back-off of 5 s between its two deliveries; then the record after it is applied.
    await()
        .atMost(Duration.ofSeconds(20))
        .untilAsserted(
            () ->
                assertThat(SpringTestEnvironment.effects(jdbc, SPENT_FIRST, "S-AFTER"))
                    .as(
                        "the record after S-FAIL, applied (deliveries of S-FAIL so far: %d)",
                        deliveries.of("S-FAIL"))
                    .isEqualTo(1));
    Duration waited = Duration.ofNanos(System.nanoTime() - start);
    List<ConsumerRecord<String, String>> deadLetters = readTopic(SPENT_FIRST + "-dlt", 1, WAIT);
    assertThat(deadLetters)
        .extracting(record -> header(record, "order-no"))
        .containsExactly("S-FAIL");
    assertThat(deadLetterReason(deadLetters.get(0)))
        .contains("Gave up after 3 failed attempts of at most 3", "declined at call 2");
    assertThat(calls.of("S-FAIL")).as("listener runs for S-FAIL").isEqualTo(2);
    assertThat(deliveries.of("S-FAIL"))
        .as("deliveries of S-FAIL: its last attempt's failure went to the recoverer at once")
        .isEqualTo(2);
    assertThat(waited).as("time until the record after S-FAIL was applied").isLessThan(WAIT_ONE);
    assertThat(store.find(failing).orElseThrow().attempts()).isEqualTo(3);
  }

  /**
   * A batch listener reserving stock for its orders through the executor, while another consumer
   * holds the stock's key: the call's {@code DedupInProgressException}, naming no record, is not
   * the listener's failure. The batch is held, run again past {@code max-attempts} without its
   * claims counting an attempt, never given up, and applied once when the holder completes.
   */
  @Test
  void aBatchWhoseNestedCallMeetsAKeyHeldElsewhereWaitsUncountedThenIsAppliedOnce(
      CapturedOutput output) throws Exception {
    DedupKey order = DedupKey.of("batch-order", "BN-1");
    try (IdempotentExecutor elsewhere =
        IdempotentExecutor.builder(store).ownerId("other-instance").build()) {
      DedupClaim stock = elsewhere.claim(DedupKey.of("batch-stock", "BN-1"), null, "elsewhere");
      long offset = send(template, NESTED, "order 1", "order-no", "BN-1");

      await()
          .atMost(WAIT)
          .failFast(
              () ->
                  assertThat(store.find(order).map(DedupRecord::attempts).orElse(0))
                      .as("attempts of BN-1 in the table")
                      .isLessThanOrEqualTo(1))
          .untilAsserted(
              () ->
                  assertThat(calls.of("BN-1"))
                      .as("listener runs for BN-1, against max-attempts 3")
                      .isGreaterThan(3));
      assertThat(SpringTestEnvironment.effects(jdbc, NESTED, "BN-1")).isZero();
      assertThat(SpringTestEnvironment.committed(NESTED, NESTED, 0)).isLessThanOrEqualTo(offset);

      stock.complete();

      await().atMost(WAIT).until(() -> SpringTestEnvironment.effects(jdbc, NESTED, "BN-1") == 1);
      await().atMost(WAIT).until(() -> SpringTestEnvironment.committed(NESTED, NESTED, 0) > offset);
    }
    DedupRecord applied = store.find(order).orElseThrow();
    assertThat(applied.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(applied.attempts()).isEqualTo(1);
    assertThat(output.getAll().lines().filter(line -> line.contains("BN-1")))
        .as("lines about BN-1")
        .noneMatch(line -> line.contains("Handler failed"));
  }

  /** One back-off of the error handler, and a margin for the polls around it. */
  static final Duration WAIT_ONE = Duration.ofSeconds(12);

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
    Charges charges(JdbcTemplate jdbc, IdempotentExecutors executors) {
      return new Charges(jdbc, executors);
    }

    /** Counts, per key, the deliveries of the records of {@link #SPENT_FIRST}. */
    @Bean
    BatchInterceptor<Object, Object> deliveryCounter() {
      return new BatchInterceptor<>() {
        @Override
        public ConsumerRecords<Object, Object> intercept(
            ConsumerRecords<Object, Object> records, Consumer<Object, Object> consumer) {
          for (ConsumerRecord<Object, Object> record : records) {
            if (record.topic().equals(SPENT_FIRST)) {
              deliveries.count(header(record, "order-no"));
            }
          }
          return records;
        }
      };
    }
  }

  static class Charges {
    final JdbcTemplate jdbc;
    final IdempotentExecutors executors;

    Charges(JdbcTemplate jdbc, IdempotentExecutors executors) {
      this.jdbc = jdbc;
      this.executors = executors;
    }

    @Idempotent(bizType = "batch-order", header = "order-no")
    @KafkaListener(id = NESTED, topics = NESTED, batch = "true")
    public void order(List<ConsumerRecord<String, String>> records) {
      for (ConsumerRecord<String, String> record : records) {
        String key = header(record, "order-no");
        calls.count(key);
        executors.defaultExecutor().execute(DedupKey.of("batch-stock", key), () -> "reserved");
        SpringTestEnvironment.effect(jdbc, NESTED, key, record.value());
      }
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

    @Idempotent(bizType = "batch-spent-first", header = "order-no")
    @KafkaListener(id = SPENT_FIRST, topics = SPENT_FIRST, batch = "true")
    public void chargeSpentFirst(List<ConsumerRecord<String, String>> records) {
      for (int i = 0; i < records.size(); i++) {
        ConsumerRecord<String, String> record = records.get(i);
        String key = header(record, "order-no");
        int call = calls.count(key);
        if (key.equals("S-FAIL")) {
          throw new BatchListenerFailedException(
              "declined", new IllegalStateException("declined at call " + call), i);
        }
        SpringTestEnvironment.effect(jdbc, SPENT_FIRST, key, record.value());
      }
    }
  }
}
