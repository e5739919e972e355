package io.consumerdedup.test.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.spring.Idempotent;
import io.consumerdedup.test.RedeliveryReport;
import io.consumerdedup.testing.TestDatabase;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * {@link RedeliverEachRecord} on an application with a record listener, a batch listener keyed by
 * the order number, and a batch listener of {@code ConsumerRecord}s whose key changes per delivery:
 * the batch listener's body runs again for the redelivered batch, and the report must name it,
 * though the record listener's runs are counted and pass.
 */
@SpringBootTest(classes = RedeliverEachRecordBatchTest.App.class)
@RedeliverEachRecord
@DirtiesContext
class RedeliverEachRecordBatchTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static String schema;

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    schema =
        BootTestEnvironment.register(
            registry, "redeliver_batch", "rbt-payments", "rbt-batch-payments", "rbt-refunds");
  }

  @AfterAll
  static void dropSchema() {
    TestDatabase.dropSchema(schema);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired RedeliveryReport redelivery;

  @Test
  void aBatchListenerWhoseKeyChangesPerDeliveryIsNamedBesideARecordListenerThatPasses()
      throws Exception {
    send("rbt-payments", "ORD-1");
    send("rbt-batch-payments", "ORD-2");
    send("rbt-refunds", "REF-1");

    await().atMost(WAIT).until(() -> redelivery.redeliveredCopies() == 3);
    assertThatThrownBy(redelivery::assertNoBodyRanTwice)
        .isInstanceOf(AssertionError.class)
        .hasMessageContaining("1 record was processed twice")
        .hasMessageContaining(
            "Listeners.refundBatch ran its body 2 times for record rbt-refunds-0@0")
        .hasMessageNotContaining("Listeners.charge ran")
        .hasMessageNotContaining("Listeners.chargeBatch ran");
    assertThat(redelivery.bodyRuns()).isEqualTo(4);
  }

  private void send(String topic, String orderNo) throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(topic, orderNo, "amount 10");
    record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
    template.send(record).get();
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listeners listeners() {
      return new Listeners();
    }
  }

  static class Listeners {
    @Idempotent(bizType = "payment", header = "order-no")
    @KafkaListener(id = "rbt-payments", topics = "rbt-payments")
    public void charge(ConsumerRecord<String, String> record) {}

    @Idempotent(bizType = "batch-payment", header = "order-no")
    @KafkaListener(id = "rbt-batch-payments", topics = "rbt-batch-payments", batch = "true")
    public void chargeBatch(List<ConsumerRecord<String, String>> records) {}

    /** A key that is new on every delivery: the mistake the report is for. */
    @Idempotent(bizType = "refund", key = "T(java.util.UUID).randomUUID().toString()")
    @KafkaListener(id = "rbt-refunds", topics = "rbt-refunds", batch = "true")
    public void refundBatch(List<ConsumerRecord<String, String>> records) {}
  }
}
