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
import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A listener that casts the {@code Consumer} it is given to {@code KafkaConsumer}, with the docs'
 * dead-letter wiring: its record is retried as for any failure of the listener, then dead-lettered
 * with headers naming the wrapper, not a bare {@code ClassCastException} after one try.
 */
@SpringBootTest(
    classes = WrappedConsumerCastDeadLetterTest.App.class,
    properties = "consumer-dedup.max-attempts=3")
@DirtiesContext
class WrappedConsumerCastDeadLetterTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final String TOPIC = "cast-dead-letter";
  static final AtomicInteger calls = new AtomicInteger();
  static final AtomicInteger casts = new AtomicInteger();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_cast_dlt", TOPIC, TOPIC + "-dlt");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;

  @Test
  void aRecordWhoseListenerCastsItsConsumerIsDeadLetteredAfterItsAttemptsNamingTheWrapper()
      throws Exception {
    send(template, TOPIC, "charge 7.00", "order-no", "D-1");

    List<ConsumerRecord<String, String>> deadLetters = readTopic(TOPIC + "-dlt", 1, WAIT);
    assertThat(deadLetters).hasSize(1);
    assertThat(header(deadLetters.get(0), "order-no")).isEqualTo("D-1");
    assertThat(casts).as("casts that failed").hasValue(calls.get());
    assertThat(calls).as("listener runs: consumer-dedup.max-attempts").hasValue(3);
    assertThat(deadLetterReason(deadLetters.get(0)))
        .contains("DedupAttemptsExhaustedException")
        .contains("io.consumerdedup.spring.WrappedConsumerCastException: Listener")
        .contains("org.apache.kafka.clients.consumer.Consumer interface");
    await().atMost(WAIT).until(() -> SpringTestEnvironment.committed(TOPIC, TOPIC, 0) == 1);
    DedupRecord row = store.find(DedupKey.of(TOPIC, "D-1")).orElseThrow();
    assertThat(row.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(row.attempts()).isEqualTo(3);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    DefaultErrorHandler errorHandler(KafkaTemplate<Object, Object> template) {
      return SpringTestEnvironment.deadLettering(template, 0, 9);
    }

    @Bean
    Charges charges() {
      return new Charges();
    }
  }

  static class Charges {
    @Idempotent(bizType = TOPIC, header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    public void charge(ConsumerRecord<String, String> record, Consumer<?, ?> consumer) {
      calls.incrementAndGet();
      if (!(consumer instanceof KafkaConsumer<?, ?>)) {
        casts.incrementAndGet();
      }
      ((KafkaConsumer<?, ?>) consumer).groupMetadata();
    }
  }
}
