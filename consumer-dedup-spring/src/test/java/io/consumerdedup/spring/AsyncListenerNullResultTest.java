package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.effect;
import static io.consumerdedup.spring.SpringTestEnvironment.effects;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import reactor.core.publisher.Mono;

/**
 * An {@code @Idempotent} listener declared to return a {@code CompletableFuture} or a {@code Mono}
 * that returns null for a record (an early {@code return null} for work done at once): the call is
 * done, as a method returning nothing would be, its key SUCCESS, and the records after it are
 * applied. Before, consumer-dedup's wait for the future threw a NullPointerException with the claim
 * still open and taken for a listener still running: never given back, its lease renewed, every
 * redelivery of the record told "in progress" by this very consumer and held, for as long as the
 * process lived (and after a restart, run again once the lease ran out). A real PostgreSQL and the
 * in-JVM broker.
 */
@SpringBootTest(classes = AsyncListenerNullResultTest.App.class)
@DirtiesContext
class AsyncListenerNullResultTest {
  static final Duration WAIT = Duration.ofSeconds(15);
  static final String FUTURE = "anr-future";
  static final String MONO = "anr-mono";

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "anr", FUTURE, MONO);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;

  @Test
  void aFutureListenerReturningNullIsDoneAndTheRecordsAfterItAreApplied() throws Exception {
    appliesOnceAndGoesOn(FUTURE);
  }

  @Test
  void aMonoListenerReturningNullIsDoneAndTheRecordsAfterItAreApplied() throws Exception {
    appliesOnceAndGoesOn(MONO);
  }

  private void appliesOnceAndGoesOn(String topic) throws Exception {
    send(template, topic, "done at once", "order-no", "null-1");
    send(template, topic, "later", "order-no", "later-2");
    await()
        .atMost(WAIT)
        .untilAsserted(
            () -> {
              assertThat(status(topic, "null-1")).as("null-1").isEqualTo(DedupStatus.SUCCESS);
              assertThat(effects(jdbc, topic, "later-2")).as("later-2 applied").isEqualTo(1);
            });
    assertThat(effects(jdbc, topic, "null-1")).as("null-1 applied").isEqualTo(1);
    await()
        .atMost(WAIT)
        .untilAsserted(
            () -> assertThat(SpringTestEnvironment.committed(topic, topic, 0)).isEqualTo(2));
  }

  private DedupStatus status(String bizType, String orderNo) {
    return store.find(DedupKey.of(bizType, orderNo)).map(DedupRecord::status).orElse(null);
  }

  static class Listeners {
    final JdbcTemplate jdbc;

    Listeners(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = FUTURE, header = "order-no")
    @KafkaListener(id = FUTURE, topics = FUTURE)
    public CompletableFuture<Void> future(String payload, @Header("order-no") String orderNo) {
      if (orderNo.startsWith("null-")) {
        effect(jdbc, FUTURE, orderNo, payload);
        return null;
      }
      return CompletableFuture.runAsync(() -> effect(jdbc, FUTURE, orderNo, payload));
    }

    @Idempotent(bizType = MONO, header = "order-no")
    @KafkaListener(id = MONO, topics = MONO)
    public Mono<Void> mono(String payload, @Header("order-no") String orderNo) {
      if (orderNo.startsWith("null-")) {
        effect(jdbc, MONO, orderNo, payload);
        return null;
      }
      return Mono.fromRunnable(() -> effect(jdbc, MONO, orderNo, payload));
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listeners listeners(JdbcTemplate jdbc) {
      return new Listeners(jdbc);
    }
  }
}
