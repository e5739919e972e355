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
import java.util.concurrent.CompletionStage;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
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

/**
 * An {@code @Idempotent} listener returning a {@code CompletionStage} that does not convert to a
 * {@code CompletableFuture} ({@code toCompletableFuture()} throws {@code
 * UnsupportedOperationException}, as a read-only stage over another library's future may): the
 * stage's work is under way all the same, and its record must be applied once, not once by that
 * work and once more by a redelivery let in as if the call had failed. A real PostgreSQL and the
 * in-JVM broker, with the library's default error handling.
 */
@SpringBootTest(classes = AsyncListenerReadOnlyStageTest.App.class)
@DirtiesContext
class AsyncListenerReadOnlyStageTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final String TOPIC = "aro-stage";

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "aro", TOPIC);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;

  @Test
  void aStageThatCannotBeConvertedIsAwaitedAndItsRecordAppliedOnce() throws Exception {
    send(template, TOPIC, "pay", "order-no", "RO-1");

    assertThat(Listeners.firstStageDone.await(WAIT.toSeconds(), TimeUnit.SECONDS))
        .as("the first call's stage completed")
        .isTrue();
    await()
        .atMost(WAIT)
        .untilAsserted(
            () -> assertThat(SpringTestEnvironment.committed(TOPIC, TOPIC, 0)).isEqualTo(1));
    assertThat(ReadOnlyStage.conversionsRefused)
        .as("toCompletableFuture() refused on the first call's stage")
        .hasPositiveValue();
    assertThat(effects(jdbc, TOPIC, "RO-1"))
        .as("RO-1 applied (listener called %s times)", Listeners.calls.get())
        .isEqualTo(1);
    assertThat(status("RO-1")).isEqualTo(DedupStatus.SUCCESS);
  }

  private DedupStatus status(String orderNo) {
    return store.find(DedupKey.of(TOPIC, orderNo)).map(DedupRecord::status).orElse(null);
  }

  /** A stage that runs and completes as any other, but refuses to be a CompletableFuture. */
  static final class ReadOnlyStage<T> extends CompletableFuture<T> {
    static final AtomicInteger conversionsRefused = new AtomicInteger();

    @Override
    public CompletableFuture<T> toCompletableFuture() {
      conversionsRefused.incrementAndGet();
      throw new UnsupportedOperationException("this CompletionStage is read-only");
    }
  }

  static class Listeners {
    static final AtomicInteger calls = new AtomicInteger();
    static final CountDownLatch firstStageDone = new CountDownLatch(1);

    final JdbcTemplate jdbc;

    Listeners(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = TOPIC, header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    public CompletionStage<Void> pay(String payload, @Header("order-no") String orderNo) {
      if (calls.incrementAndGet() > 1) {
        return CompletableFuture.runAsync(() -> effect(jdbc, TOPIC, orderNo, payload));
      }
      ReadOnlyStage<Void> stage = new ReadOnlyStage<>();
      Thread work =
          new Thread(
              () -> {
                try {
                  Thread.sleep(1_500); // a call to a slow downstream system
                  effect(jdbc, TOPIC, orderNo, payload);
                  stage.complete(null);
                } catch (Throwable e) {
                  stage.completeExceptionally(e);
                } finally {
                  firstStageDone.countDown();
                }
              });
      work.start();
      return stage;
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
