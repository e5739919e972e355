package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
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
 * An {@code @Idempotent} listener returning a {@code CompletableFuture}, in a container that runs
 * each record in a Kafka transaction, whose future is cancelled (the client it waits on gives up,
 * the application cancels its calls in flight) while the work behind it still runs, on the
 * application's own thread, outside the container's transaction: its effect is committed whatever
 * that transaction does. The key is neither recorded FAILED (the after-rollback seek would run the
 * listener again beside that work, applying the record twice at once) nor left PROCESSING under a
 * lease renewed for the process's life: it is left to its lease, and the redelivery takes it over
 * once that has run out, as after a crash. A real PostgreSQL and the in-JVM broker.
 */
@SpringBootTest(
    classes = AsyncListenerCancelledFutureTest.App.class,
    properties = {
      "spring.kafka.producer.transaction-id-prefix=dedup-async-cancel-",
      "spring.kafka.consumer.properties.isolation.level=read_committed",
      "consumer-dedup.lease=" + AsyncListenerCancelledFutureTest.LEASE_SECONDS + "s",
      "consumer-dedup.hold.initial-backoff=200ms",
      "consumer-dedup.hold.max-backoff=400ms"
    })
@DirtiesContext
class AsyncListenerCancelledFutureTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final String TOPIC = "acf-cancelled";
  static final long LEASE_SECONDS = 6;
  static final long WORK_MILLIS = 2500;

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "acf", TOPIC);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;
  @Autowired JdbcTemplate jdbc;

  @Test
  void aCancelledFutureInAKafkaTransactionLeavesItsKeyToItsLeaseNotToARetryBesideItsWork()
      throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(TOPIC, "order C-1");
    record.headers().add("order-no", "C-1".getBytes(StandardCharsets.UTF_8));
    long offset =
        template.executeInTransaction(t -> t.send(record)).get().getRecordMetadata().offset();

    await("the cancelled call's work done").atMost(WAIT).until(() -> Listeners.workDone.get() >= 0);
    assertThat(Listeners.cancelled).as("futures cancelled").hasValue(1);
    assertThat(Listeners.callsBesideWork)
        .as("listener calls while the cancelled call's work still ran")
        .hasValue(0);
    assertThat(Listeners.workDone)
        .as("effects of C-1 as the cancelled call's work applied its own")
        .hasValue(1);

    // Its outcome unknown, the key is taken over once its lease has run out, as after a crash.
    await()
        .atMost(WAIT)
        .untilAsserted(
            () ->
                assertThat(status("C-1"))
                    .as(
                        "the key of C-1 (listener calls: %s, the first one's future cancelled: %s)",
                        Listeners.calls.get(), Listeners.cancelled.get())
                    .isEqualTo(DedupStatus.SUCCESS));
    assertThat(Listeners.calls).as("the cancelled call, then the redelivery").hasValue(2);
    assertThat(Duration.ofNanos(Listeners.retriedAt - Listeners.cancelledAt))
        .as("from the cancel to the redelivery's call (lease %ss)", LEASE_SECONDS)
        .isGreaterThan(Duration.ofMillis(WORK_MILLIS));
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

    static volatile long cancelledAt;
    static volatile long retriedAt;

    private final JdbcTemplate jdbc;

    Listeners(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = TOPIC, header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    public CompletableFuture<String> pay(ConsumerRecord<String, String> record) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      if (calls.incrementAndGet() > 1) {
        retriedAt = System.nanoTime();
        if (working.get()) {
          callsBesideWork.incrementAndGet();
        }
        SpringTestEnvironment.effect(jdbc, TOPIC, orderNo, record.value());
        return CompletableFuture.completedFuture(orderNo);
      }
      working.set(true);
      CompletableFuture<String> call = new CompletableFuture<>();
      // The work runs on the application's own thread, outside the container's transaction.
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
                cancelledAt = System.nanoTime();
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
