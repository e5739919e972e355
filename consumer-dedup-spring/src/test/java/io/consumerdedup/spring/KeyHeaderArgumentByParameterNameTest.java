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
 * As {@link KeyHeaderArgumentByParameterNameTest}, with the key header taken as an argument named
 * by its parameter, as spring-messaging allows: {@code charge(String amount, @Header String
 * orderNo)} keyed by header {@code orderNo}. A record without it is refused once as a missing key,
 * naming the header. Before, only a name given in the annotation was recognised: the record was
 * retried like a handler failure, then dead-lettered with spring-messaging's "Missing header"
 * instead.
 */
@SpringBootTest(classes = KeyHeaderArgumentByParameterNameTest.App.class)
@DirtiesContext
class KeyHeaderArgumentByParameterNameTest {

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_key_param", "key-param", "key-param-dlt");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DeliveryCounter<Long> deliveries;

  @Test
  void aRecordWithoutTheKeyHeaderIsRefusedOnceAndTheNextAreChargedOnce() throws Exception {
    template.send(new ProducerRecord<>("key-param", "40.00")).get();
    SpringTestEnvironment.send(template, "key-param", "15.00", "orderNo", "ARG-1");
    SpringTestEnvironment.send(template, "key-param", "15.00", "orderNo", "ARG-1");

    List<ConsumerRecord<String, String>> deadLetters =
        SpringTestEnvironment.readTopic("key-param-dlt", 1, Duration.ofSeconds(30));
    assertThat(deadLetters).hasSize(1);
    assertThat(SpringTestEnvironment.deadLetterReason(deadLetters.get(0)))
        .contains("DedupKeyMissingException")
        .contains("header 'orderNo' is absent");
    await()
        .atMost(Duration.ofSeconds(30))
        .until(() -> SpringTestEnvironment.effects(jdbc, "key-param", "ARG-1") == 1);
    assertThat(deliveries.of(0L)).as("deliveries of the record without key").isEqualTo(1);
    Thread.sleep(1000);
    assertThat(SpringTestEnvironment.effects(jdbc, "key-param", "ARG-1")).isEqualTo(1);
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
    DeliveryCounter<Long> deliveries() {
      return new DeliveryCounter<>(ConsumerRecord::offset);
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

    @Idempotent(bizType = "payment", header = "orderNo")
    @KafkaListener(id = "key-param", topics = "key-param")
    public void charge(String amount, @Header String orderNo) {
      SpringTestEnvironment.effect(jdbc, "key-param", orderNo, amount);
    }
  }
}
