package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

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
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A key expression whose called method throws, {@code #payload.substring(8)} on a short payload,
 * cannot give this record a key on any redelivery: the record is dead-lettered at once as a
 * malformed key naming the expression and the cause, not retried as a handler failure, and no row
 * is written for it.
 */
@SpringBootTest(classes = KeyExpressionFailureIntegrationTest.App.class)
@DirtiesContext
@ExtendWith(OutputCaptureExtension.class)
class KeyExpressionFailureIntegrationTest {

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_key_expression", "key-expr", "key-expr-dlt");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DeliveryCounter<Long> deliveries;

  @Test
  void aKeyExpressionThatThrowsDeadLettersTheRecordOnceWithoutRunningTheHandler(
      CapturedOutput output) throws Exception {
    SpringTestEnvironment.send(template, "key-expr", "short");
    SpringTestEnvironment.send(template, "key-expr", "ORDER-1:15.00");

    List<ConsumerRecord<String, String>> deadLetters =
        SpringTestEnvironment.readTopic("key-expr-dlt", 1, Duration.ofSeconds(30));
    assertThat(deadLetters).hasSize(1);
    assertThat(deadLetters.get(0).value()).isEqualTo("short");
    assertThat(SpringTestEnvironment.deadLetterReason(deadLetters.get(0)))
        .contains("DedupKeyMalformedException")
        .contains("'#payload.substring(8)'")
        .contains("StringIndexOutOfBoundsException");
    await()
        .atMost(Duration.ofSeconds(30))
        .until(() -> SpringTestEnvironment.effects(jdbc, "key-expr", "15.00") == 1);

    assertThat(deliveries.of(0L)).as("attempts of the record").isEqualTo(1);
    assertThat(SpringTestEnvironment.effects(jdbc, "key-expr", null))
        .as("handler runs for the record without a key")
        .isZero();
    assertThat(jdbc.queryForObject("SELECT count(*) FROM consumer_dedup", Integer.class))
        .as("dedup rows: only the good record's")
        .isEqualTo(1);
    assertThat(output.getAll().lines())
        .as("the one log line of the refused record, at ERROR")
        .filteredOn(line -> line.contains("failed on this record"))
        .singleElement()
        .matches(
            line ->
                line.contains("ERROR")
                    && line.contains("key expression '#payload.substring(8)'")
                    && line.contains("StringIndexOutOfBoundsException")
                    && line.contains("key-expr-0@0"));
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
    Orders orders(JdbcTemplate jdbc) {
      return new Orders(jdbc);
    }
  }

  static class Orders {
    final JdbcTemplate jdbc;

    Orders(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = "order", key = "#payload.substring(8)")
    @KafkaListener(id = "key-expr", topics = "key-expr")
    public void place(String payload) {
      SpringTestEnvironment.effect(
          jdbc, "key-expr", payload.length() >= 8 ? payload.substring(8) : null, payload);
    }
  }
}
