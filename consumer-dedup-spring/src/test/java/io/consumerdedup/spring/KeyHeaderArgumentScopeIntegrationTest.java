package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;

import java.time.Duration;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A record that lacks a {@code @Header} argument is refused once as a missing key only where that
 * header is the key of the {@code @Idempotent} listener being called. Elsewhere, in a listener
 * without {@code @Idempotent}, or for an argument whose name is only part of the key header's,
 * spring-kafka's own handling stands: retried with the back-off, then recovered.
 */
@SpringBootTest(classes = KeyHeaderArgumentScopeIntegrationTest.App.class)
@DirtiesContext
class KeyHeaderArgumentScopeIntegrationTest {
  private static final int ATTEMPTS = 3;

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry,
        "spring_key_argument_scope",
        "kh-charge",
        "kh-charge-dlt",
        "kh-audit",
        "kh-audit-dlt",
        "kh-refund",
        "kh-refund-dlt");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DeliveryCounter<String> deliveries;

  @Test
  void aListenerWithoutIdempotentKeepsSpringKafkasRetriesForAMissingHeader() throws Exception {
    SpringTestEnvironment.send(template, "kh-audit", "15.00");

    ConsumerRecord<String, String> deadLetter = onlyDeadLetter("kh-audit-dlt");
    assertThat(deliveries.of("kh-audit")).as("attempts").isEqualTo(ATTEMPTS);
    assertThat(SpringTestEnvironment.deadLetterReason(deadLetter))
        .contains("Missing header 'ref'")
        .doesNotContain("DedupKeyMissingException");
  }

  @Test
  void anArgumentNamedLikePartOfTheKeyHeaderIsNotTakenForTheKey() throws Exception {
    SpringTestEnvironment.send(template, "kh-refund", "15.00", "order-no", "R-1");

    ConsumerRecord<String, String> deadLetter = onlyDeadLetter("kh-refund-dlt");
    assertThat(deliveries.of("kh-refund")).as("attempts").isEqualTo(ATTEMPTS);
    assertThat(SpringTestEnvironment.deadLetterReason(deadLetter))
        .contains("Missing header 'no'")
        .doesNotContain("DedupKeyMissingException");
  }

  @Test
  void theKeyHeaderOfTheCalledIdempotentListenerIsStillRefusedOnce() throws Exception {
    SpringTestEnvironment.send(template, "kh-charge", "15.00");

    ConsumerRecord<String, String> deadLetter = onlyDeadLetter("kh-charge-dlt");
    assertThat(deliveries.of("kh-charge")).as("attempts").isEqualTo(1);
    assertThat(SpringTestEnvironment.deadLetterReason(deadLetter))
        .contains("DedupKeyMissingException")
        .contains("header 'ref' is absent");
  }

  private static ConsumerRecord<String, String> onlyDeadLetter(String topic) {
    List<ConsumerRecord<String, String>> deadLetters =
        SpringTestEnvironment.readTopic(topic, 1, Duration.ofSeconds(30));
    assertThat(deadLetters).hasSize(1);
    return deadLetters.get(0);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    /** The usual wiring: retries with a back-off, then the dead-letter topic. */
    @Bean
    DefaultErrorHandler errorHandler(KafkaTemplate<Object, Object> template) {
      return SpringTestEnvironment.deadLettering(template, 50, ATTEMPTS - 1);
    }

    @Bean
    DeliveryCounter<String> deliveries() {
      return new DeliveryCounter<>(ConsumerRecord::topic);
    }

    @Bean
    Listeners listeners() {
      return new Listeners();
    }
  }

  static class Listeners {
    /** Its key header 'ref' is also an argument. */
    @Idempotent(bizType = "payment", header = "ref")
    @KafkaListener(id = "kh-charge", topics = "kh-charge")
    public void charge(String amount, @Header("ref") String ref) {}

    /** Not idempotent, in another container, with an argument of the same name. */
    @KafkaListener(id = "kh-audit", topics = "kh-audit")
    public void audit(String amount, @Header("ref") String ref) {}

    /** Keyed by header 'order-no'; its argument 'no' is another header. */
    @Idempotent(bizType = "refund", key = "#headers['order-no']")
    @KafkaListener(id = "kh-refund", topics = "kh-refund")
    public void refund(String amount, @Header("no") String no) {}
  }
}
