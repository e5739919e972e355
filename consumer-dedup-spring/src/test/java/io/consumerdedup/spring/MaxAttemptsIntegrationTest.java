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
import java.util.stream.IntStream;
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
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A record listener that always fails, with an error handler that would deliver a record ten times
 * and {@code consumer-dedup.max-attempts=3}: the attempts are counted in the dedup table, so a
 * restart of the consumer does not grant the record a fresh set. Before, the error handler counted
 * in memory only, and each restart ran the listener up to ten more times.
 */
@SpringBootTest(
    classes = MaxAttemptsIntegrationTest.App.class,
    properties = "consumer-dedup.max-attempts=3")
@DirtiesContext
@ExtendWith(OutputCaptureExtension.class)
class MaxAttemptsIntegrationTest {
  /** Per key, how often the listener ran. */
  static final Counts<String> calls = new Counts<>();

  static final Duration WAIT = Duration.ofSeconds(60);
  static final String FAILING = "max-attempts";
  static final String SPENT = "max-attempts-spent";

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry, "spring_max_attempts", FAILING, FAILING + "-dlt", SPENT, SPENT + "-dlt");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DeliveryCounter<String> deliveries;
  @Autowired DedupStore store;
  @Autowired IdempotentExecutors executors;
  @Autowired KafkaListenerEndpointRegistry registry;

  @Test
  void anAlwaysFailingRecordRunsThreeTimesAcrossARestartThenGoesToTheDeadLetterTopic(
      CapturedOutput output) throws Exception {
    DedupKey key = DedupKey.of("declined", "M-1");
    send(template, FAILING, "charge 12.00", "order-no", "M-1");

    await().atMost(WAIT).until(() -> calls.of("M-1") == 2 && status(key) == DedupStatus.FAILED);
    MessageListenerContainer container = registry.getListenerContainer(FAILING);
    container.stop(); // within the error handler's 5 s back-off: a restart of the consumer
    assertThat(committed(FAILING)).as("nothing committed past the failed record").isEqualTo(-1);
    container.start();

    List<ConsumerRecord<String, String>> deadLetters = readTopic(FAILING + "-dlt", 1, WAIT);
    assertThat(deadLetters).hasSize(1);
    assertThat(header(deadLetters.get(0), "order-no")).isEqualTo("M-1");
    assertThat(deadLetterReason(deadLetters.get(0)))
        .contains("DedupAttemptsExhaustedException")
        .contains("Gave up after 3 failed attempts of at most 3")
        .contains("card declined, call 3");
    await().atMost(WAIT).until(() -> committed(FAILING) == 1);
    assertThat(calls.of("M-1")).as("listener runs, across the restart").isEqualTo(3);
    assertThat(deliveries.of("M-1"))
        .as("deliveries: the third attempt's failure went to the recoverer at once")
        .isEqualTo(3);
    DedupRecord record = store.find(key).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(record.attempts()).isEqualTo(3);

    List<String> lines = output.getAll().lines().toList();
    for (int attempt = 1; attempt <= 3; attempt++) {
      String expected = "key declined/M-1, attempt " + attempt + " of 3";
      List<Integer> at = indexesOf(lines, expected);
      assertThat(at).as("WARN lines of attempt %d", attempt).hasSize(1);
      String line = lines.get(at.get(0));
      assertThat(line)
          .contains("WARN", "Handler failed for max-attempts-0@0 (group max-attempts)")
          .contains("java.lang.IllegalStateException: card declined, call " + attempt);
      assertThat(lines.get(at.get(0) + 1)).as("no stack trace at WARN").doesNotStartWith("\tat ");
    }
    assertThat(lines)
        .filteredOn(line -> line.contains("ERROR") && line.contains("Gave up on max-attempts-0@0"))
        .as("one ERROR line for the record given up")
        .singleElement()
        .satisfies(line -> assertThat(line).contains("Gave up after 3 failed attempts"));
  }

  /**
   * A record whose key failed its three attempts before (its dead letter lost when the process
   * died, say) goes to the dead-letter topic with the last error the table recorded, without
   * running the listener again and without counting an attempt.
   */
  @Test
  void aKeyWhoseAttemptsAreSpentIsDeadLetteredWithoutRunningTheListener() throws Exception {
    DedupKey key = DedupKey.of("spent", "S-1");
    IdempotentExecutor executor = executors.defaultExecutor();
    for (int i = 1; i <= 3; i++) {
      executor.claim(key, null, null).fail(new IllegalStateException("the bank said no " + i));
    }

    send(template, SPENT, "charge 30.00", "order-no", "S-1");

    List<ConsumerRecord<String, String>> deadLetters = readTopic(SPENT + "-dlt", 1, WAIT);
    assertThat(deadLetters).hasSize(1);
    assertThat(deadLetterReason(deadLetters.get(0)))
        .contains("DedupAttemptsExhaustedException")
        .contains("Gave up after 3 failed attempts of at most 3")
        .contains("the bank said no 3");
    await().atMost(WAIT).until(() -> committed(SPENT) == 1);
    assertThat(calls.of("S-1")).isZero();
    assertThat(deliveries.of("S-1")).as("to the recoverer at once").isEqualTo(1);
    DedupRecord record = store.find(key).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(record.attempts()).as("the claim that found them spent is not counted").isEqualTo(3);
  }

  private static List<Integer> indexesOf(List<String> lines, String text) {
    return IntStream.range(0, lines.size())
        .filter(i -> lines.get(i).contains(text))
        .boxed()
        .toList();
  }

  private DedupStatus status(DedupKey key) {
    return store.find(key).map(DedupRecord::status).orElse(null);
  }

  private static long committed(String topic) throws Exception {
    return SpringTestEnvironment.committed(topic, topic, 0);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    /** Ten deliveries in memory, five seconds apart, then the dead-letter topic. */
    @Bean
    DefaultErrorHandler errorHandler(KafkaTemplate<Object, Object> template) {
      return SpringTestEnvironment.deadLettering(template, 5_000, 9);
    }

    /** Per key, how often the container delivered its record. */
    @Bean
    DeliveryCounter<String> deliveries() {
      return new DeliveryCounter<>(record -> header(record, "order-no"));
    }

    @Bean
    Charges charges() {
      return new Charges();
    }
  }

  static class Charges {
    @Idempotent(bizType = "declined", header = "order-no")
    @KafkaListener(id = FAILING, topics = FAILING)
    public void charge(ConsumerRecord<String, String> record) {
      int call = calls.count(header(record, "order-no"));
      throw new IllegalStateException("card declined, call " + call);
    }

    @Idempotent(bizType = "spent", header = "order-no")
    @KafkaListener(id = SPENT, topics = SPENT)
    public void chargeSpent(ConsumerRecord<String, String> record) {
      calls.count(header(record, "order-no"));
    }
  }
}
