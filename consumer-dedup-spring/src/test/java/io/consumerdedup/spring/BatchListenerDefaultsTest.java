package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.IdempotentExecutor;
import java.time.Duration;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A batch listener with nothing but the auto-configuration (no error handler, no back-off, no
 * consumer-dedup property): a record whose key another consumer holds under a live lease is never
 * skipped, although spring-kafka's default error handler gives up on a record after ten quick
 * tries; it waits, and is applied once when the holder lets go.
 */
@SpringBootTest(classes = BatchListenerDefaultsTest.App.class)
@DirtiesContext
class BatchListenerDefaultsTest {
  static final Duration WAIT = Duration.ofSeconds(60);

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_batch_defaults", "bd-held");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;

  @Test
  void aKeyHeldElsewhereIsNeitherSkippedNorAppliedTwiceWithTheDefaults() throws Exception {
    DedupKey heldKey = DedupKey.of("batch-defaults", "BD-2");
    try (IdempotentExecutor other =
        IdempotentExecutor.builder(store).ownerId("other-consumer").build()) {
      DedupClaim held = other.claim(heldKey, null, "another consumer");
      send(template, "bd-held", "a", "order-no", "BD-1");
      send(template, "bd-held", "b", "order-no", "BD-2");
      send(template, "bd-held", "c", "order-no", "BD-3");

      await().atMost(WAIT).until(() -> effects("BD-1") == 1);
      // The fault is real: the key is held by the other consumer's live lease meanwhile.
      assertThat(store.find(heldKey).orElseThrow().status()).isEqualTo(DedupStatus.PROCESSING);
      assertThat(store.find(heldKey).orElseThrow().owner()).isEqualTo("other-consumer");
      // Far longer than the default error handler's ten tries without back-off.
      Thread.sleep(5_000);
      assertThat(committed()).as("nothing committed past the held record").isLessThanOrEqualTo(1);
      assertThat(effects("BD-2")).isZero();

      held.fail(new IllegalStateException("the other consumer gave up"));
      await().atMost(WAIT).until(() -> committed() == 3);
    }
    assertThat(effects("BD-1")).isEqualTo(1);
    assertThat(effects("BD-2")).isEqualTo(1);
    assertThat(effects("BD-3")).isEqualTo(1);
  }

  private long committed() throws Exception {
    return SpringTestEnvironment.committed("bd-held", "bd-held", 0);
  }

  private int effects(String bizKey) {
    return SpringTestEnvironment.effects(jdbc, "batch-defaults", bizKey);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
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

    @Idempotent(bizType = "batch-defaults", header = "order-no")
    @KafkaListener(id = "bd-held", topics = "bd-held", batch = "true")
    public void charge(List<ConsumerRecord<String, String>> records) {
      for (ConsumerRecord<String, String> record : records) {
        SpringTestEnvironment.effect(
            jdbc, "batch-defaults", header(record, "order-no"), record.value());
      }
    }
  }
}
