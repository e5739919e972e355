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
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.UnaryOperator;
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
 * its container, whose future is given up on while the work behind it still runs: the application
 * cancels it (its own timeout gives up on the call), {@code orTimeout} completes it with a bare
 * {@code TimeoutException}, or another library's time limiter fails a future of its own with one.
 * None stops anything, and the work applies its effect after all. The redelivery must not run the
 * listener beside that work: it is held until the key's lease has run out, as after a crash. A real
 * PostgreSQL and the in-JVM broker, at the library's defaults otherwise.
 */
@SpringBootTest(
    classes = AsyncListenerCancelledWorkRunningTest.App.class,
    properties = {
      "consumer-dedup.lease=" + AsyncListenerCancelledWorkRunningTest.LEASE_SECONDS + "s",
      "consumer-dedup.hold.initial-backoff=200ms",
      "consumer-dedup.hold.max-backoff=400ms"
    })
@DirtiesContext
class AsyncListenerCancelledWorkRunningTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final String TOPIC = "acw-cancelled-outside";
  static final String OR_TIMEOUT_TOPIC = "acw-or-timeout-outside";
  static final String WORK_TIMEOUT_TOPIC = "acw-work-timed-out";
  static final long LEASE_SECONDS = 4;
  static final long WORK_MILLIS = 1500;

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "acw", TOPIC, OR_TIMEOUT_TOPIC, WORK_TIMEOUT_TOPIC);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;
  @Autowired JdbcTemplate jdbc;

  @Test
  void aCancelledFutureWhoseWorkStillRunsLeavesItsKeyToItsLeaseNotToARetryBesideIt()
      throws Exception {
    assertLeftToLease(TOPIC, "W-1", Listeners.CANCELLED, "cancelled");
  }

  @Test
  void aFutureTimedOutByOrTimeoutWhileItsWorkRunsLeavesItsKeyToItsLeaseNotToARetryBesideIt()
      throws Exception {
    assertLeftToLease(OR_TIMEOUT_TOPIC, "T-1", Listeners.TIMED_OUT, "timed-out");
  }

  @Test
  void aFutureTimedOutByAnotherLibrarysTimeLimiterWhileItsWorkRunsLeavesItsKeyToItsLease()
      throws Exception {
    assertLeftToLease(WORK_TIMEOUT_TOPIC, "U-1", Listeners.LIMITED, "time-limited");
  }

  private void assertLeftToLease(String topic, String orderNo, WorkRunning work, String givenUp)
      throws Exception {
    long offset =
        SpringTestEnvironment.send(template, topic, "order " + orderNo, "order-no", orderNo);

    await("the " + givenUp + " call's work done")
        .atMost(WAIT)
        .until(() -> work.workDone.get() >= 0);
    assertThat(work.givenUp).as("futures " + givenUp).hasValue(1);
    assertThat(work.callsBesideWork)
        .as("listener calls while the %s call's work still ran", givenUp)
        .hasValue(0);
    assertThat(work.workDone)
        .as("effects of %s as the %s call's work applied its own", orderNo, givenUp)
        .hasValue(1);

    // Its outcome unknown, the key is taken over once its lease has run out, as after a crash.
    await()
        .atMost(WAIT)
        .untilAsserted(
            () ->
                assertThat(status(topic, orderNo))
                    .as("the key of %s", orderNo)
                    .isEqualTo(DedupStatus.SUCCESS));
    assertThat(work.calls).as("the %s call, then the redelivery", givenUp).hasValue(2);
    await().atMost(WAIT).until(() -> SpringTestEnvironment.committed(topic, topic, 0) > offset);
  }

  private DedupStatus status(String topic, String orderNo) {
    return store.find(DedupKey.of(topic, orderNo)).map(DedupRecord::status).orElse(null);
  }

  /** A listener's first call, whose future is given up on while its work runs on. */
  static final class WorkRunning {
    final AtomicInteger calls = new AtomicInteger();
    final AtomicInteger givenUp = new AtomicInteger();
    final AtomicInteger callsBesideWork = new AtomicInteger();
    final AtomicBoolean working = new AtomicBoolean();

    /** The effects counted as the given-up call's work applied its own; -1 until then. */
    final AtomicInteger workDone = new AtomicInteger(-1);

    CompletableFuture<String> call(
        JdbcTemplate jdbc,
        String topic,
        ConsumerRecord<String, String> record,
        UnaryOperator<CompletableFuture<String>> giveUp) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      if (calls.incrementAndGet() > 1) {
        if (working.get()) {
          callsBesideWork.incrementAndGet();
        }
        SpringTestEnvironment.effect(jdbc, topic, orderNo, record.value());
        return CompletableFuture.completedFuture(orderNo);
      }
      working.set(true);
      CompletableFuture<String> call = new CompletableFuture<>();
      CompletableFuture.delayedExecutor(WORK_MILLIS, TimeUnit.MILLISECONDS)
          .execute(
              () -> {
                SpringTestEnvironment.effect(jdbc, topic, orderNo, record.value());
                workDone.set(SpringTestEnvironment.effects(jdbc, topic, orderNo));
                working.set(false);
                call.complete(orderNo); // too late: the future was given up on
              });
      return giveUp.apply(call);
    }
  }

  static class Listeners {
    static final WorkRunning CANCELLED = new WorkRunning();
    static final WorkRunning TIMED_OUT = new WorkRunning();
    static final WorkRunning LIMITED = new WorkRunning();

    private final JdbcTemplate jdbc;

    Listeners(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = TOPIC, header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    public CompletableFuture<String> pay(ConsumerRecord<String, String> record) {
      return CANCELLED.call(jdbc, TOPIC, record, Listeners::cancelSoon);
    }

    @Idempotent(bizType = OR_TIMEOUT_TOPIC, header = "order-no")
    @KafkaListener(id = OR_TIMEOUT_TOPIC, topics = OR_TIMEOUT_TOPIC)
    public CompletableFuture<String> payWithinTimeout(ConsumerRecord<String, String> record) {
      return TIMED_OUT.call(jdbc, OR_TIMEOUT_TOPIC, record, Listeners::timeOutSoon);
    }

    /** The application's own timeout gives up on the call, cancelling its future. */
    private static CompletableFuture<String> cancelSoon(CompletableFuture<String> call) {
      CompletableFuture.delayedExecutor(200, TimeUnit.MILLISECONDS)
          .execute(
              () -> {
                if (call.cancel(true)) {
                  CANCELLED.givenUp.incrementAndGet();
                }
              });
      return call;
    }

    /** {@code orTimeout} completes the call's future with a bare {@code TimeoutException}. */
    private static CompletableFuture<String> timeOutSoon(CompletableFuture<String> call) {
      return call.orTimeout(200, TimeUnit.MILLISECONDS)
          .whenComplete(
              (value, error) -> {
                if (error instanceof TimeoutException) {
                  TIMED_OUT.givenUp.incrementAndGet();
                }
              });
    }

    @Idempotent(bizType = WORK_TIMEOUT_TOPIC, header = "order-no")
    @KafkaListener(id = WORK_TIMEOUT_TOPIC, topics = WORK_TIMEOUT_TOPIC)
    public CompletableFuture<String> payWithinATimeLimiter(ConsumerRecord<String, String> record) {
      return LIMITED.call(jdbc, WORK_TIMEOUT_TOPIC, record, Listeners::limitSoon);
    }

    /**
     * A time limiter of another library's making (resilience4j's, a scheduler of the application's
     * own): its own future, failed with a {@code TimeoutException} that has a message, while the
     * call's work runs on.
     */
    private static CompletableFuture<String> limitSoon(CompletableFuture<String> call) {
      CompletableFuture<String> limited = new CompletableFuture<>();
      call.whenComplete(
          (value, error) -> {
            if (error == null) {
              limited.complete(value);
            } else {
              limited.completeExceptionally(error);
            }
          });
      CompletableFuture.delayedExecutor(200, TimeUnit.MILLISECONDS)
          .execute(
              () -> {
                if (limited.completeExceptionally(
                    new TimeoutException("TimeLimiter 'payments' recorded a timeout exception."))) {
                  LIMITED.givenUp.incrementAndGet();
                }
              });
      return limited;
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
