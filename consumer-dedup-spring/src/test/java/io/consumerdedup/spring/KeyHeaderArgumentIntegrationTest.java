package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import java.time.Duration;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * The natural listener {@code charge(String amount, @Header("order-no") String orderNo)}: a record
 * without the header fails while spring-messaging resolves the arguments, before consumer-dedup
 * sees the call. It is still refused once as a missing key, naming the header, not retried like a
 * handler failure; the records after it are charged once. The same holds for an argument
 * {@code @Header String orderNo} named by its parameter, as spring-messaging allows (before, only a
 * name given in the annotation was recognised: the record was retried as a handler failure, then
 * dead-lettered with spring-messaging's "Missing header").
 */
@SpringBootTest(classes = KeyHeaderArgumentIntegrationTest.App.class)
@DirtiesContext
class KeyHeaderArgumentIntegrationTest {

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry,
        "spring_key_argument",
        "key-argument",
        "key-argument-dlt",
        "key-param",
        "key-param-dlt",
        "key-empty",
        "key-empty-dlt");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DeliveryCounter<String> deliveries;

  @Test
  void aRecordWithoutTheKeyHeaderIsRefusedOnceAndTheNextAreChargedOnce() throws Exception {
    refusedOnceAndTheNextChargedOnce("key-argument", "order-no");
  }

  @Test
  void aRecordWithoutAKeyHeaderNamedByItsParameterIsRefusedOnceAndTheNextAreChargedOnce()
      throws Exception {
    refusedOnceAndTheNextChargedOnce("key-param", "orderNo");
  }

  @Test
  void aRecordWhoseKeyHeaderIsPresentButEmptyIsRefusedOnceAsAMissingKey() throws Exception {
    // The argument resolves (to an empty String), so it is the key that refuses the record.
    SpringTestEnvironment.send(template, "key-empty", "40.00", "order-no", "");
    SpringTestEnvironment.send(template, "key-empty", "15.00", "order-no", "ARG-2");

    List<ConsumerRecord<String, String>> deadLetters =
        SpringTestEnvironment.readTopic("key-empty-dlt", 1, Duration.ofSeconds(30));
    assertThat(deadLetters).hasSize(1);
    assertThat(SpringTestEnvironment.deadLetterReason(deadLetters.get(0)))
        .contains("DedupKeyMissingException")
        .contains("header 'order-no' is absent or empty");
    await()
        .atMost(Duration.ofSeconds(30))
        .until(() -> SpringTestEnvironment.effects(jdbc, "key-empty", "ARG-2") == 1);
    assertThat(deliveries.of("key-empty@0")).as("deliveries of the empty key").isEqualTo(1);
    assertThat(SpringTestEnvironment.effects(jdbc, "key-empty", "")).isZero();
  }

  private void refusedOnceAndTheNextChargedOnce(String topic, String header) throws Exception {
    template.send(new ProducerRecord<>(topic, "40.00")).get();
    SpringTestEnvironment.send(template, topic, "15.00", header, "ARG-1");
    SpringTestEnvironment.send(template, topic, "15.00", header, "ARG-1");

    List<ConsumerRecord<String, String>> deadLetters =
        SpringTestEnvironment.readTopic(topic + "-dlt", 1, Duration.ofSeconds(30));
    assertThat(deadLetters).hasSize(1);
    assertThat(SpringTestEnvironment.deadLetterReason(deadLetters.get(0)))
        .contains("DedupKeyMissingException")
        .contains("header '" + header + "' is absent");
    await()
        .atMost(Duration.ofSeconds(30))
        .until(() -> SpringTestEnvironment.effects(jdbc, topic, "ARG-1") == 1);
    assertThat(deliveries.of(topic + "@0")).as("deliveries of the record without key").isEqualTo(1);
    Thread.sleep(1000);
    assertThat(SpringTestEnvironment.effects(jdbc, topic, "ARG-1")).isEqualTo(1);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    /** The usual wiring: retries with a back-off, then the dead-letter topic. */
    @Bean
    DefaultErrorHandler errorHandler(KafkaTemplate<Object, Object> template) {
      return SpringTestEnvironment.deadLettering(template, 100, 5);
    }

    @Bean
    DeliveryCounter<String> deliveries() {
      return new DeliveryCounter<>(record -> record.topic() + "@" + record.offset());
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

    @Idempotent(bizType = "payment", header = "order-no")
    @KafkaListener(id = "key-argument", topics = "key-argument")
    public void charge(String amount, @Header("order-no") String orderNo) {
      SpringTestEnvironment.effect(jdbc, "key-argument", orderNo, amount);
    }

    @Idempotent(bizType = "payment-empty", header = "order-no")
    @KafkaListener(id = "key-empty", topics = "key-empty")
    public void chargeEmpty(String amount, @Header("order-no") String orderNo) {
      SpringTestEnvironment.effect(jdbc, "key-empty", orderNo, amount);
    }

    @Idempotent(bizType = "payment-by-name", header = "orderNo")
    @KafkaListener(id = "key-param", topics = "key-param")
    public void chargeByName(String amount, @Header String orderNo) {
      SpringTestEnvironment.effect(jdbc, "key-param", orderNo, amount);
    }
  }
}
