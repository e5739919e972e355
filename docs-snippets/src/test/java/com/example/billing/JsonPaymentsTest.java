package com.example.billing;

import static io.consumerdedup.docs.DocsKafka.committed;
import static io.consumerdedup.docs.DocsKafka.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.docs.DocsDatabase;
import io.consumerdedup.docs.spring.ErrorHandling;
import io.consumerdedup.spring.Idempotent;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Base64;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Import;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.test.context.TestPropertySource;

/**
 * docs/spring-boot.md's JSON payloads, with the properties the page shows and its error handler: a
 * listener keyed by {@code #payload.orderNo} gets a {@link Payment}, once per order; a record that
 * is not JSON and a payment that fails reach the dead-letter topic, and the partition moves on.
 * Without the producer's JSON serializer the recoverer could not write the failed Payment.
 */
@SpringBootTest(
    classes = JsonPaymentsTest.App.class,
    properties = "billing.retry.initial-interval=50ms")
@TestPropertySource(locations = "classpath:json-payloads.properties")
@DirtiesContext
class JsonPaymentsTest {
  @DynamicPropertySource
  static void kafka(DynamicPropertyRegistry registry) {
    TestKafka.createTopics(1, "json-payments", "json-payments-dlt");
    registry.add("spring.kafka.bootstrap-servers", TestKafka::bootstrapServers);
  }

  @Autowired JsonPayments payments;
  @Autowired DedupStore store;

  @Test
  void aJsonPaymentIsAppliedOncePerOrderAndWhatCannotBeAppliedIsDeadLettered() throws Exception {
    send("json-payments", "{\"orderNo\":\"J-1\",\"amount\":25.00}");
    send("json-payments", "{\"orderNo\":\"J-1\",\"amount\":25.00}");
    send("json-payments", "not json");
    send("json-payments", "{\"orderNo\":\"J-2\",\"amount\":-1}");
    long last = send("json-payments", "{\"orderNo\":\"J-3\",\"amount\":7.50}");

    await()
        .atMost(Duration.ofSeconds(60))
        .until(() -> committed("json-billing", "json-payments") == last + 1);
    assertThat(payments.charged()).extracting(Payment::orderNo).containsExactly("J-1", "J-3");
    assertThat(store.find(DedupKey.of("payment", "J-1")).orElseThrow().status())
        .isEqualTo(DedupStatus.SUCCESS);
    List<ConsumerRecord<String, String>> deadLetters =
        TestKafka.readFromStart("json-payments-dlt", 2, Duration.ofSeconds(30));
    // The bytes that were not JSON, written by the JSON serializer: a JSON string of their base64.
    String notJson =
        Base64.getEncoder().encodeToString("not json".getBytes(StandardCharsets.UTF_8));
    assertThat(deadLetters)
        .extracting(ConsumerRecord::value)
        .containsExactly('"' + notJson + '"', "{\"orderNo\":\"J-2\",\"amount\":-1}");
  }

  static class JsonPayments {
    private final List<Payment> charged = new CopyOnWriteArrayList<>();

    /** What the listener charged (through the proxy that @Idempotent puts around this bean). */
    List<Payment> charged() {
      return charged;
    }

    @Idempotent(bizType = "payment", key = "#payload.orderNo")
    @KafkaListener(topics = "json-payments", groupId = "json-billing")
    void charge(Payment payment) {
      if (payment.amount().signum() < 0) {
        throw new IllegalArgumentException("a negative amount: " + payment.amount());
      }
      charged.add(payment);
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  @Import({ErrorHandling.class, JsonPayments.class})
  static class App {
    @Bean
    DocsDatabase dataSource() {
      return DocsDatabase.create("docs_json");
    }
  }
}
