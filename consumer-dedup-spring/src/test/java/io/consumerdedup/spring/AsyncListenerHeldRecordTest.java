package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.IdempotentExecutor;
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
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import reactor.core.publisher.Mono;

/**
 * An {@code @Idempotent} listener returning a {@code Mono}, whose record's key another instance
 * holds: the record is held (retry later), and once the holder has failed it is applied once, and
 * the record after it too. Before, spring-kafka paused the whole consumer for the held record's
 * offset it waited to be acknowledged out of order (it forgets such offsets only on its own
 * record-in-retry exception), and neither record was ever delivered again. A real PostgreSQL and
 * the in-JVM broker.
 */
@SpringBootTest(classes = AsyncListenerHeldRecordTest.App.class)
@DirtiesContext
class AsyncListenerHeldRecordTest {
  static final Duration WAIT = Duration.ofSeconds(15);
  static final String TOPIC = "ahr-orders";
  static final Map<String, AtomicInteger> effects = new ConcurrentHashMap<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "async_held", TOPIC);
    registry.add("consumer-dedup.hold.initial-backoff", () -> "200ms");
    registry.add("consumer-dedup.hold.max-backoff", () -> "500ms");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void aRecordHeldForAKeyInProgressElsewhereIsAppliedOnceTheHolderFails() throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(TOPIC);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    try (IdempotentExecutor otherInstance =
        IdempotentExecutor.builder(store).ownerId("other-instance").build()) {
      DedupClaim claim = otherInstance.claim(DedupKey.of("ahr", "H-1"), null, "elsewhere");
      SpringTestEnvironment.send(template, TOPIC, "payload", "order-no", "H-1");
      SpringTestEnvironment.send(template, TOPIC, "payload", "order-no", "H-2");
      Thread.sleep(1000); // held meanwhile
      assertThat(effects).as("applied while the key is held elsewhere").isEmpty();
      claim.fail(new IllegalStateException("failed on the other instance"));
    }
    await()
        .atMost(WAIT)
        .untilAsserted(
            () -> assertThat(status("H-2")).as("H-2 status").isEqualTo(DedupStatus.SUCCESS));
    assertThat(status("H-1")).as("H-1 status").isEqualTo(DedupStatus.SUCCESS);
    assertThat(effects.get("H-1")).as("H-1 applied").hasValue(1);
    assertThat(effects.get("H-2")).as("H-2 applied").hasValue(1);
  }

  private DedupStatus status(String orderNo) {
    return store.find(DedupKey.of("ahr", orderNo)).map(DedupRecord::status).orElse(null);
  }

  static class Listener {
    @Idempotent(bizType = "ahr", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    public Mono<Void> onOrder(String payload, @Header("order-no") String orderNo) {
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
  }
}
