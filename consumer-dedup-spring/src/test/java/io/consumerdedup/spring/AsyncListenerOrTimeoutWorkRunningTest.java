package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
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
 * its container, whose future times out through {@code orTimeout} (completed exceptionally with a
 * bare {@code TimeoutException}) while the work behind it still runs: the timeout stops nothing,
 * and the work applies its effect after all. The redelivery must not run the listener beside that
 * work: it is held until the key's lease has run out, as for a cancelled future. A {@code
 * TimeoutException} the work itself failed with (a call it waited on timed out) ends that work, and
 * is still retried at once. A real PostgreSQL and the in-JVM broker, at the library's defaults
 * otherwise.
 */
@SpringBootTest(
    classes = AsyncListenerOrTimeoutWorkRunningTest.App.class,
    properties = {
      "consumer-dedup.lease=" + AsyncListenerOrTimeoutWorkRunningTest.LEASE_SECONDS + "s",
      "consumer-dedup.hold.initial-backoff=200ms",
      "consumer-dedup.hold.max-backoff=400ms"
    })
@DirtiesContext
class AsyncListenerOrTimeoutWorkRunningTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final String TOPIC = "aot-timed-out-outside";
  static final String WORK_TOPIC = "aot-work-timed-out";
  static final long LEASE_SECONDS = 8;
  static final long WORK_MILLIS = 1500;

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "aot", TOPIC, WORK_TOPIC);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;
  @Autowired JdbcTemplate jdbc;

  @Test
  void aFutureTimedOutByOrTimeoutWhileItsWorkRunsLeavesItsKeyToItsLeaseNotToARetryBesideIt()
      throws Exception {
    long offset = SpringTestEnvironment.send(template, TOPIC, "order T-1", "order-no", "T-1");

    await("the timed-out call's work done").atMost(WAIT).until(() -> Listeners.workDone.get() >= 0);
    assertThat(Listeners.timedOut).as("futures timed out").hasValue(1);
    assertThat(Listeners.callsBesideWork)
        .as("listener calls while the timed-out call's work still ran")
        .hasValue(0);
    assertThat(Listeners.workDone)
        .as("effects of T-1 as the timed-out call's work applied its own")
        .hasValue(1);

    // Its outcome unknown, the key is taken over once its lease has run out, as after a crash.
    await()
        .atMost(WAIT)
        .untilAsserted(
            () -> assertThat(status("T-1")).as("the key of T-1").isEqualTo(DedupStatus.SUCCESS));
    assertThat(Listeners.calls).as("the timed-out call, then the redelivery").hasValue(2);
    await().atMost(WAIT).until(() -> SpringTestEnvironment.committed(TOPIC, TOPIC, 0) > offset);
  }

  @Test
  void aTimeoutExceptionTheWorkItselfFailedWithIsRetriedAtOnce() throws Exception {
    long offset = SpringTestEnvironment.send(template, WORK_TOPIC, "order U-1", "order-no", "U-1");

    await()
        .atMost(WAIT)
        .untilAsserted(
            () ->
                assertThat(store.find(DedupKey.of(WORK_TOPIC, "U-1")).map(DedupRecord::status))
                    .as("the key of U-1")
                    .contains(DedupStatus.SUCCESS));
    assertThat(WorkListener.calls).as("the failed call, then the redelivery").hasValue(2);
    assertThat(Duration.ofNanos(WorkListener.retriedAt - WorkListener.failedAt))
        .as("from the work's TimeoutException to the redelivery's call (lease %ss)", LEASE_SECONDS)
        .isLessThan(Duration.ofSeconds(LEASE_SECONDS - 2));
    await()
        .atMost(WAIT)
        .until(() -> SpringTestEnvironment.committed(WORK_TOPIC, WORK_TOPIC, 0) > offset);
  }

  private DedupStatus status(String orderNo) {
    return store.find(DedupKey.of(TOPIC, orderNo)).map(DedupRecord::status).orElse(null);
  }

  static class Listeners {
    static final AtomicInteger calls = new AtomicInteger();
    static final AtomicInteger timedOut = new AtomicInteger();
    static final AtomicInteger callsBesideWork = new AtomicInteger();
    static final AtomicBoolean working = new AtomicBoolean();

    /** The effects counted as the timed-out call's work applied its own; -1 until then. */
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
                call.complete(orderNo); // too late: the future timed out
              });
      return call.orTimeout(200, TimeUnit.MILLISECONDS)
          .whenComplete(
              (value, error) -> {
                if (error instanceof TimeoutException) {
                  timedOut.incrementAndGet();
                }
              });
    }
  }

  static class WorkListener {
    static final AtomicInteger calls = new AtomicInteger();
    static volatile long failedAt;
    static volatile long retriedAt;

    @Idempotent(bizType = WORK_TOPIC, header = "order-no")
    @KafkaListener(id = WORK_TOPIC, topics = WORK_TOPIC)
    public CompletableFuture<String> pay(ConsumerRecord<String, String> record) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      if (calls.incrementAndGet() > 1) {
        retriedAt = System.nanoTime();
        return CompletableFuture.completedFuture(orderNo);
      }
      return CompletableFuture.supplyAsync(
          () -> {
            try {
              // The call the work waits on times out, and the work ends with that failure.
              return new CompletableFuture<String>().get(50, TimeUnit.MILLISECONDS);
            } catch (TimeoutException | InterruptedException | ExecutionException e) {
              failedAt = System.nanoTime();
              throw new CompletionException(e);
            }
          });
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listeners listeners(JdbcTemplate jdbc) {
      return new Listeners(jdbc);
    }

    @Bean
    WorkListener workListener() {
      return new WorkListener();
    }
  }
}
