package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
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
import org.springframework.kafka.listener.ConcurrentMessageListenerContainer;
import org.springframework.kafka.listener.KafkaMessageListenerContainer;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import reactor.core.publisher.Mono;
import reactor.core.publisher.Sinks;

/**
 * An {@code @Idempotent} listener whose Mono never completes, under a long {@code
 * consumer-dedup.async-listener-timeout} (60 s): stopping the container ends the wait at once, as
 * the timeout would (the lease no longer renewed, the record not committed past). Started again,
 * the container delivers the record again, which takes the key over once the lease has run out and
 * applies it once; the first call's outcome, reported after that, is fenced. Before, the stop
 * waited out the whole timeout on the consumer thread. The same for the one child of a concurrent
 * container that delivers the record, stopped on its own: its wait watched the parent, which kept
 * running. A real PostgreSQL and the in-JVM broker.
 */
@SpringBootTest(classes = AsyncListenerStopTest.App.class)
@DirtiesContext
class AsyncListenerStopTest {
  static final Duration WAIT = Duration.ofSeconds(15);
  static final String TOPIC = "als-orders";
  static final Map<String, AtomicInteger> effects = new ConcurrentHashMap<>();
  static final AtomicInteger calls = new AtomicInteger();
  static final Sinks.One<Void> first = Sinks.one();
  static final String CHILDREN_TOPIC = "als-children";
  static final AtomicInteger childCalls = new AtomicInteger();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "async_stop", TOPIC, CHILDREN_TOPIC);
    registry.add("consumer-dedup.lease", () -> "2s");
    registry.add("consumer-dedup.async-listener-timeout", () -> "60s");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void aStopEndsTheWaitForAMonoThatNeverCompletes() throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(TOPIC);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    SpringTestEnvironment.send(template, TOPIC, "payload", "order-no", "S-1");
    await().atMost(WAIT).until(() -> calls.get() == 1);
    assertThat(status("S-1"))
        .as("S-1 status while its Mono runs")
        .isEqualTo(DedupStatus.PROCESSING);

    long start = System.nanoTime();
    container.stop();
    assertThat(Duration.ofNanos(System.nanoTime() - start))
        .as("time to stop the container while a Mono never completes")
        .isLessThan(Duration.ofSeconds(5));
    assertThat(status("S-1")).as("S-1 status after the stop").isEqualTo(DedupStatus.PROCESSING);

    container.start();
    await()
        .atMost(WAIT)
        .untilAsserted(
            () -> assertThat(status("S-1")).as("S-1 status").isEqualTo(DedupStatus.SUCCESS));
    assertThat(effects.get("S-1")).as("S-1 applied").hasValue(1);
    assertThat(calls).as("listener calls (the record was not committed past)").hasValue(2);

    // The first call reports failure late: fenced, the key stays as the takeover left it.
    first.tryEmitError(new IllegalStateException("late failure of the first call"));
    Thread.sleep(500);
    DedupRecord row = store.find(key("S-1")).orElseThrow();
    assertThat(row.status()).as("S-1 status after the late outcome").isEqualTo(DedupStatus.SUCCESS);
    assertThat(row.attempts()).as("attempts of S-1 (the second took the key over)").isEqualTo(2);
  }

  @Test
  void aStopOfTheChildContainerDeliveringTheRecordEndsTheWaitAndAnotherChildAppliesIt()
      throws Exception {
    ConcurrentMessageListenerContainer<?, ?> container =
        (ConcurrentMessageListenerContainer<?, ?>) containers.getListenerContainer(CHILDREN_TOPIC);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    SpringTestEnvironment.send(template, CHILDREN_TOPIC, "payload", "order-no", "C-1");
    await().atMost(WAIT).until(() -> childCalls.get() == 1);
    KafkaMessageListenerContainer<?, ?> child =
        container.getContainers().stream()
            .filter(each -> !each.getAssignedPartitions().isEmpty())
            .findFirst()
            .orElseThrow();

    long start = System.nanoTime();
    child.stop(); // as an application stops one consumer of its container, or a fatal error does
    assertThat(Duration.ofNanos(System.nanoTime() - start))
        .as("time to stop the child container whose consumer waits for a Mono that never completes")
        .isLessThan(Duration.ofSeconds(5));
    assertThat(container.isRunning()).as("the container, its other child consuming").isTrue();

    await()
        .atMost(WAIT)
        .untilAsserted(
            () ->
                assertThat(store.find(DedupKey.of("alsc", "C-1")).map(DedupRecord::status))
                    .as("C-1 status, taken over by the other child")
                    .contains(DedupStatus.SUCCESS));
    assertThat(effects.get("C-1")).as("C-1 applied").hasValue(1);
  }

  private static DedupKey key(String orderNo) {
    return DedupKey.of("als", orderNo);
  }

  private DedupStatus status(String orderNo) {
    return store.find(key(orderNo)).map(DedupRecord::status).orElse(null);
  }

  static class Listener {
    @Idempotent(bizType = "als", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    public Mono<Void> onOrder(String payload, @Header("order-no") String orderNo) {
      if (calls.incrementAndGet() == 1) {
        return first.asMono();
      }
      return Mono.fromRunnable(
          () -> effects.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet());
    }
  }

  static class ChildrenListener {
    @Idempotent(bizType = "alsc", header = "order-no")
    @KafkaListener(id = CHILDREN_TOPIC, topics = CHILDREN_TOPIC, concurrency = "2")
    public Mono<Void> onOrder(String payload, @Header("order-no") String orderNo) {
      if (childCalls.incrementAndGet() == 1) {
        return Mono.never();
      }
      return Mono.fromRunnable(
          () -> effects.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet());
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listener listener() {
      return new Listener();
    }

    @Bean
    ChildrenListener childrenListener() {
      return new ChildrenListener();
    }
  }
}
