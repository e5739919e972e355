package io.consumerdedup.test.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.spring.Idempotent;
import io.consumerdedup.test.RedeliveryReport;
import io.consumerdedup.testing.TestDatabase;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
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
 * Two tests of one class written as the testing guide shows them, without resetting the report
 * themselves: the second test's wait for its copy must not be met by the first test's copy, or its
 * assertion passes before its listener (whose key changes per delivery) has run at all.
 */
@SpringBootTest(classes = RedeliveryReportBetweenTestsTest.App.class)
@RedeliverEachRecord
@DirtiesContext
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class RedeliveryReportBetweenTestsTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static String schema;

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    schema =
        BootTestEnvironment.register(registry, "redeliver_between", "rb-payments", "rb-refunds");
  }

  @AfterAll
  static void dropSchema() {
    TestDatabase.dropSchema(schema);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired RedeliveryReport redelivery;

  @Test
  @Order(1)
  void aListenerKeyedByTheOrderNumberPasses() throws Exception {
    send("rb-payments", "ORD-1");

    await().atMost(WAIT).until(() -> redelivery.redeliveredCopies() == 1);
    redelivery.assertNoBodyRanTwice();
  }

  @Test
  @Order(2)
  void aLaterTestOfTheSameClassCountsOnlyItsOwnRecords() throws Exception {
    assertThat(redelivery.redeliveredCopies())
        .as("copies counted before this test sent anything")
        .isZero();
    assertThat(redelivery.bodyRuns()).as("body runs counted before this test").isZero();

    send("rb-refunds", "REF-1");

    await().atMost(WAIT).until(() -> redelivery.redeliveredCopies() == 1);
    assertThatThrownBy(redelivery::assertNoBodyRanTwice)
        .isInstanceOf(AssertionError.class)
        .hasMessageContaining("Listeners.refund ran its body 2 times for record rb-refunds-0@0");
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
    @KafkaListener(id = "rb-payments", topics = "rb-payments")
    public void charge(ConsumerRecord<String, String> record) {}

    /** A key that is new on every delivery: the mistake the report is for. */
    @Idempotent(bizType = "refund", key = "T(java.util.UUID).randomUUID().toString()")
    @KafkaListener(id = "rb-refunds", topics = "rb-refunds")
    public void refund(ConsumerRecord<String, String> record) {}
  }
}
