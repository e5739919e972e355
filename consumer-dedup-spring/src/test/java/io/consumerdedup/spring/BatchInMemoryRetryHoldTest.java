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
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A batch listener with the Boot defaults that throws an exception of its own once, while a record
 * of its batch is held by another consumer's live lease: spring-kafka's {@code DefaultErrorHandler}
 * retries the batch in memory (its fallback handler calls the listener again without going through
 * the container's error handler); each retry stops at the held record. Those retries must hold it,
 * not count towards the recoverer, which would discard the batch and commit past it.
 */
@SpringBootTest(classes = BatchInMemoryRetryHoldTest.App.class)
@DirtiesContext
class BatchInMemoryRetryHoldTest {
  static final Duration WAIT = Duration.ofSeconds(60);
  static final String TOPIC = "bm-retry-held";
  static final AtomicInteger calls = new AtomicInteger();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_batch_mem_retry", TOPIC);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry registry;

  @Test
  void aRecordHeldElsewhereIsNotDiscardedByTheInMemoryRetriesOfTheBatch() throws Exception {
    DedupKey heldKey = DedupKey.of("batch-mem-retry", "b-2");
    try (IdempotentExecutor other =
        IdempotentExecutor.builder(store).ownerId("other-consumer").build()) {
      DedupClaim held = other.claim(heldKey, null, "another consumer, dead but its lease live");
      send(template, TOPIC, "a", "order-no", "b-1");
      send(template, TOPIC, "b", "order-no", "b-2");
      send(template, TOPIC, "c", "order-no", "b-3");
      registry.getListenerContainer(TOPIC).start(); // one poll brings the three of them

      // The listener threw once, then its in-memory retry applied b-1 and stopped at b-2.
      await().atMost(WAIT).until(() -> effects("b-1") == 1);
      assertThat(calls.get())
          .as("the failed call and the in-memory retry")
          .isGreaterThanOrEqualTo(2);
      assertThat(store.find(heldKey).orElseThrow().status()).isEqualTo(DedupStatus.PROCESSING);
      assertThat(store.find(heldKey).orElseThrow().owner()).isEqualTo("other-consumer");
      // Longer than the default handler's ten quick retries and its recoverer.
      Thread.sleep(5_000);
      assertThat(committed()).as("nothing committed past the held record").isLessThanOrEqualTo(1);
      assertThat(effects("b-2")).isZero();
      assertThat(effects("b-3")).as("b-3 waits behind b-2").isZero();

      held.fail(new IllegalStateException("the other consumer's lease ends"));
      await().atMost(WAIT).until(() -> committed() == 3);
    }
    assertThat(effects("b-1")).isEqualTo(1);
    assertThat(effects("b-2")).as("b-2 applied once after the holder let go").isEqualTo(1);
    assertThat(effects("b-3")).isEqualTo(1);
  }

  private long committed() throws Exception {
    return SpringTestEnvironment.committed(TOPIC, TOPIC, 0);
  }

  private int effects(String bizKey) {
    return SpringTestEnvironment.effects(jdbc, "batch-mem-retry", bizKey);
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

    @Idempotent(bizType = "batch-mem-retry", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, batch = "true", autoStartup = "false")
    public void charge(List<ConsumerRecord<String, String>> records) {
      if (calls.incrementAndGet() == 1) {
        throw new IllegalStateException("the listener's own failure, once");
      }
      for (ConsumerRecord<String, String> record : records) {
        SpringTestEnvironment.effect(
            jdbc, "batch-mem-retry", header(record, "order-no"), record.value());
      }
    }
  }
}
