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
import reactor.core.publisher.Mono;

/**
 * An {@code @Idempotent} listener returning a {@code Mono} whose work, run as it is subscribed,
 * throws a JVM-fatal {@code Error} (a {@code StackOverflowError}, a {@code NoClassDefFoundError}):
 * Reactor throws such an {@code Error} out of the subscription rather than signalling it, so it
 * leaves consumer-dedup's conversion of the Mono to a future, not the listener call. It is the
 * listener's failed attempt, as if the method had thrown it: the key is FAILED, and once the
 * container the {@code Error} stopped is started again the record is applied once. Before, the
 * claim was never ended: the key stayed PROCESSING under a lease the executor renewed for as long
 * as the process lived, and the redelivery after the restart was held as "in progress" by this very
 * consumer. A real PostgreSQL and the in-JVM broker.
 */
@SpringBootTest(classes = MonoListenerFatalErrorTest.App.class)
@DirtiesContext
class MonoListenerFatalErrorTest {
  static final Duration WAIT = Duration.ofSeconds(15);
  static final String TOPIC = "mfe-orders";
  static final Map<String, AtomicInteger> effects = new ConcurrentHashMap<>();
  static final AtomicBoolean thrown = new AtomicBoolean();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "mono_fatal", TOPIC);
    registry.add("consumer-dedup.hold.initial-backoff", () -> "200ms");
    registry.add("consumer-dedup.hold.max-backoff", () -> "1s");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void aFatalErrorOfAMonoAsItIsSubscribedFailsTheKeyAndTheRestartAppliesItOnce() throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(TOPIC);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    SpringTestEnvironment.send(template, TOPIC, "payload", "order-no", "M-1");
    await().atMost(WAIT).until(() -> thrown.get() && !container.isRunning());
    assertThat(effects).as("applied before the restart").isEmpty();
    assertThat(status("M-1")).as("M-1 after the Error").isEqualTo(DedupStatus.FAILED);

    container.start();
    await().atMost(WAIT).until(() -> status("M-1") == DedupStatus.SUCCESS);
    assertThat(effects.get("M-1")).as("M-1 applied").hasValue(1);
  }

  private DedupStatus status(String orderNo) {
    return store.find(DedupKey.of("mfe", orderNo)).map(DedupRecord::status).orElse(null);
  }

  static class Listener {
    @Idempotent(bizType = "mfe", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    public Mono<Void> onOrder(String payload, @Header("order-no") String orderNo) {
      return Mono.fromRunnable(
          () -> {
            if (thrown.compareAndSet(false, true)) {
              throw new StackOverflowError("injected as the Mono is subscribed");
            }
            effects.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
          });
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
