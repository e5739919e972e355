package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.spring.GivenUpRecordLogIntegrationTest.CountingDeadLetters;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
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
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.DefaultAfterRollbackProcessor;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.util.backoff.FixedBackOff;

/**
 * In Kafka transactions (Spring Boot's {@code transaction-id-prefix}) the application's
 * after-rollback processor recovers a record whose transaction keeps rolling back, as spring-kafka
 * has it without consumer-dedup. A listener that always throws is dead-lettered by it once its
 * tries are spent, nothing the listener sent ever committed. A record whose commit fails (the
 * listener sends a record larger than its topic accepts) and whose dead-letter topic refuses it
 * (larger than its {@code max.message.bytes}) must not be taken again at once, an ERROR each time,
 * for as long as it refuses; it waits the hold back-off, as without Kafka transactions.
 */
@SpringBootTest(
    classes = KafkaTransactionRefusedDeadLetterTest.App.class,
    properties = {
      "spring.kafka.producer.transaction-id-prefix=dedup-refused-tx-",
      "spring.kafka.consumer.properties.isolation.level=read_committed",
      "logging.level.io.consumerdedup.spring.internal.RecoveredRecordLogger=DEBUG"
    })
@DirtiesContext
@ExtendWith(OutputCaptureExtension.class)
class KafkaTransactionRefusedDeadLetterTest {
  static final String REFUSED = "ktx-refused";
  static final String AUDIT = "ktx-refused-audit";
  static final String FAILING = "ktx-failing";
  static final String FAILING_RECEIPTS = "ktx-failing-receipts";
  static final AtomicInteger failingCalls = new AtomicInteger();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry, "spring_ktx_refused", REFUSED, FAILING, FAILING + "-dlt", FAILING_RECEIPTS);
    TestKafka.createTopic(
        REFUSED + "-dlt",
        1,
        Map.of(
            GivenUpRecordLogIntegrationTest.MAX_MESSAGE_BYTES,
            GivenUpRecordLogIntegrationTest.SMALL_LIMIT));
    TestKafka.createTopic(
        AUDIT,
        1,
        Map.of(
            GivenUpRecordLogIntegrationTest.MAX_MESSAGE_BYTES,
            GivenUpRecordLogIntegrationTest.SMALL_LIMIT));
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;

  /**
   * spring-kafka gives a container with a transaction manager no error handler of its own: the
   * listener's failure rolls the transaction back and goes to the after-rollback processor, which
   * retries it once here, then dead-letters it in a transaction that commits its offset.
   */
  @Test
  void aListenerThatAlwaysThrowsIsDeadLetteredByTheApplicationsAfterRollbackProcessor()
      throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(FAILING, "order KF-1");
    record.headers().add("order-no", "KF-1".getBytes(StandardCharsets.UTF_8));
    long offset =
        template.executeInTransaction(t -> t.send(record)).get().getRecordMetadata().offset();

    await()
        .atMost(Duration.ofSeconds(30))
        .until(() -> SpringTestEnvironment.committed(FAILING, FAILING, 0) > offset);
    List<ConsumerRecord<String, String>> deadLetters =
        SpringTestEnvironment.readWritten(FAILING + "-dlt", "read_committed");
    assertThat(deadLetters).extracting(ConsumerRecord::value).containsExactly("order KF-1");
    assertThat(SpringTestEnvironment.deadLetterReason(deadLetters.get(0)))
        .as("the dead letter's exception headers")
        .contains("the listener always fails")
        .doesNotContain("RecordInRetryException");
    // Not delivered again after its dead letter: the later writes would come within a second.
    assertThat(SpringTestEnvironment.readTopic(FAILING + "-dlt", 2, Duration.ofMillis(1500)))
        .as("dead letters of %s-0@%d", FAILING, offset)
        .hasSize(1);
    assertThat(failingCalls).as("the first delivery and the processor's one retry").hasValue(2);
    List<String> receipts =
        SpringTestEnvironment.readWritten(FAILING_RECEIPTS, "read_committed").stream()
            .map(ConsumerRecord::value)
            .toList();
    assertThat(receipts).as("receipts of the failed calls committed").isEmpty();
    assertThat(store.find(DedupKey.of(FAILING, "KF-1")).orElseThrow().status())
        .isEqualTo(DedupStatus.FAILED);
  }

  @Test
  void aRecordWhoseDeadLetterIsRefusedWaitsAGrowingBackOffLoggedOnceAtError(CapturedOutput output)
      throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(REFUSED, "x".repeat(2_000));
    record.headers().add("order-no", "KR-1".getBytes(StandardCharsets.UTF_8));
    long offset =
        template.executeInTransaction(t -> t.send(record)).get().getRecordMetadata().offset();

    GivenUpRecordLogIntegrationTest.assertDeadLetterHeldUntilAccepted(output, REFUSED, offset);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    /**
     * Dead letters in the after-rollback processor of Kafka transactions, their offsets committed
     * in a transaction; one retry.
     */
    @Bean
    DefaultAfterRollbackProcessor<Object, Object> afterRollbackProcessor(
        KafkaTemplate<Object, Object> template) {
      return new DefaultAfterRollbackProcessor<>(
          new CountingDeadLetters(template), new FixedBackOff(0, 1), template, true);
    }

    @Bean
    Listener listener(KafkaTemplate<String, String> template) {
      return new Listener(template);
    }
  }

  static class Listener {
    final KafkaTemplate<String, String> template;

    Listener(KafkaTemplate<String, String> template) {
      this.template = template;
    }

    /** Sends its receipt in the container's transaction, then fails. */
    @Idempotent(bizType = FAILING, header = "order-no")
    @KafkaListener(id = FAILING, topics = FAILING)
    public void fail(String payload) {
      template.send(FAILING_RECEIPTS, payload);
      failingCalls.incrementAndGet();
      throw new IllegalStateException("the listener always fails");
    }

    /** Its transaction's commit always fails: the broker refuses the audit record. */
    @Idempotent(bizType = "ktx-refused", header = "order-no")
    @KafkaListener(id = REFUSED, topics = REFUSED)
    public void place(String payload) {
      template.send(AUDIT, payload);
    }
  }
}
