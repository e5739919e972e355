package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
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
import org.springframework.kafka.listener.RecordInterceptor;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import reactor.core.publisher.Mono;
import reactor.core.scheduler.Schedulers;

/**
 * An {@code @Idempotent} listener returning a {@code Mono} whose work, run on a Reactor scheduler
 * thread, throws a JVM-fatal {@code Error}: Reactor only logs it, and the Mono never completes. The
 * wait for it ends after {@code consumer-dedup.async-listener-timeout}: the key's lease is no
 * longer renewed, the record is held and delivered again, and once the lease has run out that
 * delivery takes the key over and applies it once; the container stops at once. Before, the
 * consumer thread waited for good: the key stayed PROCESSING under a lease renewed for as long as
 * the process lived, and the container could not stop. A real PostgreSQL and the in-JVM broker.
 */
@SpringBootTest(classes = AsyncListenerNeverCompletesTest.App.class)
@DirtiesContext
class AsyncListenerNeverCompletesTest {
  static final Duration WAIT = Duration.ofSeconds(15);
  static final String TOPIC = "anc-orders";
  static final Map<String, AtomicInteger> effects = new ConcurrentHashMap<>();
  static final AtomicBoolean thrown = new AtomicBoolean();
  static final AtomicBoolean firstEnded = new AtomicBoolean();
  static final AtomicInteger calls = new AtomicInteger();
  static final List<String> failures = new CopyOnWriteArrayList<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "async_never", TOPIC);
    registry.add("consumer-dedup.lease", () -> "2s");
    registry.add("consumer-dedup.async-listener-timeout", () -> "1s");
    registry.add("consumer-dedup.hold.initial-backoff", () -> "200ms");
    registry.add("consumer-dedup.hold.max-backoff", () -> "500ms");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void aMonoThatNeverCompletesLetsItsKeyGoAfterTheLeaseAndTheContainerStop() throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(TOPIC);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    SpringTestEnvironment.send(template, TOPIC, "payload", "order-no", "N-1");
    await().atMost(WAIT).until(thrown::get);

    await()
        .atMost(WAIT)
        .untilAsserted(
            () -> assertThat(status("N-1")).as("N-1 status").isEqualTo(DedupStatus.SUCCESS));
    assertThat(effects.get("N-1")).as("N-1 applied").hasValue(1);
    assertThat(firstEnded).as("the first Mono ever ended").isFalse();
    assertThat(failures)
        .as("what the wait that ended threw")
        .anySatisfy(
            failure ->
                assertThat(failure)
                    .contains("The Mono of ")
                    .contains("did not complete within consumer-dedup.async-listener-timeout")
                    .contains("an outcome the call reports before then is still written"));
    assertThat(calls).as("listener calls").hasValue(2);
    assertThat(store.find(key("N-1")).orElseThrow().attempts())
        .as("attempts of N-1 (the second took the key over)")
        .isEqualTo(2);

    long start = System.nanoTime();
    container.stop();
    assertThat(Duration.ofNanos(System.nanoTime() - start))
        .as("time to stop the container")
        .isLessThan(Duration.ofSeconds(5));
  }

  private static DedupKey key(String orderNo) {
    return DedupKey.of("anc", orderNo);
  }

  private DedupStatus status(String orderNo) {
    return store.find(key(orderNo)).map(DedupRecord::status).orElse(null);
  }

  static class Listener {
    @Idempotent(bizType = "anc", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    public Mono<Void> onOrder(String payload, @Header("order-no") String orderNo) {
      calls.incrementAndGet();
      if (!thrown.get()) {
        return Mono.<Void>fromRunnable(
                () -> {
                  thrown.set(true);
                  throw new NoClassDefFoundError("injected on the scheduler thread");
                })
            .subscribeOn(Schedulers.boundedElastic())
            .doFinally(signal -> firstEnded.set(true));
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
    RecordInterceptor<Object, Object> failureRecorder() {
      return SpringTestEnvironment.failureRecorder(failures);
    }
  }
}
