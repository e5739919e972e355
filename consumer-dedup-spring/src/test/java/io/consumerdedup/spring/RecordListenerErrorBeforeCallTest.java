package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.internal.FaultPoints;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * An {@code Error} (an {@code OutOfMemoryError}, say) thrown after a record's key was claimed and
 * before its listener was called, here while the call waits for the SUCCESS marks of the poll
 * before: the claim is given back, not left PROCESSING under a lease that the executor renews for
 * as long as the process lives; once the container is started again, every record is applied once.
 * Before, the key stayed in progress, so its record was held again and again and never applied. A
 * real PostgreSQL and the in-JVM broker; the {@code Error} is thrown from the engine's fault point
 * on the container's thread.
 */
@SpringBootTest(classes = RecordListenerErrorBeforeCallTest.App.class)
@DirtiesContext
class RecordListenerErrorBeforeCallTest {
  static final Duration WAIT = Duration.ofSeconds(60);
  static final String TOPIC = "ebc-orders";
  static final Map<String, AtomicInteger> effects = new ConcurrentHashMap<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "error_before_call", TOPIC);
    registry.add("consumer-dedup.hold.initial-backoff", () -> "200ms");
    registry.add("consumer-dedup.hold.max-backoff", () -> "1s");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void anErrorAfterTheClaimAndBeforeTheListenerGivesTheClaimBack() throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(TOPIC);
    if (!container.isRunning()) {
      container.start();
    }
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    send("K-0");
    await().atMost(WAIT).until(() -> applied("K-") == 1);

    // The next poll's first call waits for K-0's mark once it has claimed the poll's keys: the
    // Error is thrown there, on the container's thread, once.
    AtomicBoolean thrown = new AtomicBoolean();
    FaultPoints.install(
        point -> {
          if (point == FaultPoints.Point.BEFORE_OFFSET_COMMIT
              && Thread.currentThread().getName().startsWith(TOPIC)
              && thrown.compareAndSet(false, true)) {
            throw new OutOfMemoryError("injected after the claim, before the listener");
          }
        });
    try {
      container.pause();
      await().atMost(WAIT).until(container::isContainerPaused);
      for (int i = 1; i <= 4; i++) {
        send("K-" + i);
      }
      container.resume();
      await().atMost(WAIT).until(() -> thrown.get() && !container.isRunning());
    } finally {
      FaultPoints.install(null);
    }
    assertThat(applied("K-")).isEqualTo(1);
    for (int i = 1; i <= 4; i++) {
      assertThat(status("K-" + i)).as("K-" + i + " after the Error").isNull();
    }

    container.start();
    await().atMost(WAIT).until(() -> applied("K-") == 5);
    effects.forEach((key, count) -> assertThat(count.get()).as(key).isEqualTo(1));
    for (int i = 0; i <= 4; i++) {
      int n = i;
      await().atMost(WAIT).until(() -> status("K-" + n) == DedupStatus.SUCCESS);
    }
  }

  /**
   * The {@code Error} comes while the engine answers the claims of a poll, after the one statement
   * claimed them all: none of the poll's keys is left in progress, each record is claimed alone and
   * applied once, and the container goes on. Before, every key of the poll stayed PROCESSING under
   * leases renewed for as long as the process lived.
   */
  @Test
  void anErrorWhileThePollsClaimsAreAnsweredGivesThemAllBack() throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(TOPIC);
    if (!container.isRunning()) {
      container.start();
    }
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    AtomicBoolean thrown = new AtomicBoolean();
    FaultPoints.install(
        point -> {
          if (point == FaultPoints.Point.AFTER_CLAIM
              && Thread.currentThread().getName().startsWith(TOPIC)
              && thrown.compareAndSet(false, true)) {
            throw new OutOfMemoryError("injected while the poll's claims are answered");
          }
        });
    try {
      container.pause();
      await().atMost(WAIT).until(container::isContainerPaused);
      for (int i = 0; i < 4; i++) {
        send("L-" + i);
      }
      container.resume();
      await().atMost(WAIT).until(thrown::get);
      await().atMost(WAIT).until(() -> applied("L-") == 4);
    } finally {
      FaultPoints.install(null);
    }
    assertThat(container.isRunning()).as("the container, after the Error").isTrue();
    effects.forEach((key, count) -> assertThat(count.get()).as(key).isEqualTo(1));
    for (int i = 0; i < 4; i++) {
      int n = i;
      await().atMost(WAIT).until(() -> status("L-" + n) == DedupStatus.SUCCESS);
    }
  }

  private void send(String orderNo) throws Exception {
    SpringTestEnvironment.send(template, TOPIC, "payload of " + orderNo, "order-no", orderNo);
  }

  private static int applied(String prefix) {
    return (int) effects.keySet().stream().filter(key -> key.startsWith(prefix)).count();
  }

  private DedupStatus status(String orderNo) {
    return store.find(DedupKey.of("ebc", orderNo)).map(DedupRecord::status).orElse(null);
  }

  static class Listener {
    @Idempotent(bizType = "ebc", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    void onOrder(String payload, @Header("order-no") String orderNo) {
      effects.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listener listener() {
      return new Listener();
    }
  }
}
