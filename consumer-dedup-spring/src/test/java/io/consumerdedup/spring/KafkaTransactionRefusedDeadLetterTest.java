package io.consumerdedup.spring;

import io.consumerdedup.spring.GivenUpRecordLogIntegrationTest.CountingDeadLetters;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.util.Map;
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
 * In Kafka transactions the after-rollback processor recovers a record whose transaction keeps
 * rolling back (here its commit fails: the listener sends a record larger than its topic accepts):
 * a {@code DeadLetterPublishingRecoverer} whose dead-letter topic refuses the record (larger than
 * its {@code max.message.bytes}) must not have it taken again at once, an ERROR each time, for as
 * long as it refuses; it waits the hold back-off, as without Kafka transactions.
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

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_ktx_refused", REFUSED);
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

    /** Its transaction's commit always fails: the broker refuses the audit record. */
    @Idempotent(bizType = "ktx-refused", header = "order-no")
    @KafkaListener(id = REFUSED, topics = REFUSED)
    public void place(String payload) {
      template.send(AUDIT, payload);
    }
  }
}
