package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
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
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * An {@code @Idempotent} listener returning a {@code CompletableFuture}, outside any transaction of
 * its container, whose future the application cancels (its own timeout gives up on the call) while
 * the work behind it still runs: cancelling a {@code CompletableFuture} stops nothing, and the work
 * applies its effect after all. The redelivery must not run the listener beside that work: it is
 * held until the key's lease has run out, as after a crash. A real PostgreSQL and the in-JVM
 * broker, at the library's defaults otherwise.
 */
@SpringBootTest(
    classes = AsyncListenerCancelledWorkRunningTest.App.class,
    properties = {
      "consumer-dedup.lease=3s",
      "consumer-dedup.hold.initial-backoff=200ms",
      "consumer-dedup.hold.max-backoff=400ms"
    })
@DirtiesContext
class AsyncListenerCancelledWorkRunningTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final String TOPIC = "acw-cancelled-outside";
  static final long WORK_MILLIS = 1500;

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "acw", TOPIC);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;
  @Autowired JdbcTemplate jdbc;

  @Test
  void aCancelledFutureWhoseWorkStillRunsLeavesItsKeyToItsLeaseNotToARetryBesideIt()
      throws Exception {
    long offset = SpringTestEnvironment.send(template, TOPIC, "order W-1", "order-no", "W-1");

    await("the cancelled call's work done").atMost(WAIT).until(() -> Listeners.workDone.get() >= 0);
    assertThat(Listeners.cancelled).as("futures cancelled").hasValue(1);
    assertThat(Listeners.callsBesideWork)
        .as("listener calls while the cancelled call's work still ran")
        .hasValue(0);
    assertThat(Listeners.workDone)
        .as("effects of W-1 as the cancelled call's work applied its own")
        .hasValue(1);

    // Its outcome unknown, the key is taken over once its lease has run out, as after a crash.
    await()
        .atMost(WAIT)
        .untilAsserted(
            () -> assertThat(status("W-1")).as("the key of W-1").isEqualTo(DedupStatus.SUCCESS));
    assertThat(Listeners.calls).as("the cancelled call, then the redelivery").hasValue(2);
    await().atMost(WAIT).until(() -> SpringTestEnvironment.committed(TOPIC, TOPIC, 0) > offset);
  }

  private DedupStatus status(String orderNo) {
    return store.find(DedupKey.of(TOPIC, orderNo)).map(DedupRecord::status).orElse(null);
  }

  static class Listeners {
    static final AtomicInteger calls = new AtomicInteger();
    static final AtomicInteger cancelled = new AtomicInteger();
    static final AtomicInteger callsBesideWork = new AtomicInteger();
    static final AtomicBoolean working = new AtomicBoolean();

    /** The effects counted as the cancelled call's work applied its own; -1 until then. */
    static final AtomicInteger workDone = new AtomicInteger(-1);

    private final JdbcTemplate jdbc;

    Listeners(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = TOPIC, header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    public CompletableFuture<String> pay(ConsumerRecord<String, String> record) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      if (calls.incrementAndGet() > 1) {
        if (working.get()) {
          callsBesideWork.incrementAndGet();
        }
        SpringTestEnvironment.effect(jdbc, TOPIC, orderNo, record.value());
        return CompletableFuture.completedFuture(orderNo);
      }
      working.set(true);
      CompletableFuture<String> call = new CompletableFuture<>();
      CompletableFuture.delayedExecutor(WORK_MILLIS, TimeUnit.MILLISECONDS)
          .execute(
              () -> {
                SpringTestEnvironment.effect(jdbc, TOPIC, orderNo, record.value());
                workDone.set(SpringTestEnvironment.effects(jdbc, TOPIC, orderNo));
                working.set(false);
                call.complete(orderNo); // too late: the future was cancelled
              });
      CompletableFuture.delayedExecutor(200, TimeUnit.MILLISECONDS)
          .execute(
              () -> {
                if (call.cancel(true)) {
                  cancelled.incrementAndGet();
                }
              });
      return call;
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
