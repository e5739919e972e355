package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
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
import org.springframework.kafka.listener.BatchInterceptor;
import org.springframework.kafka.listener.adapter.RecordFilterStrategy;
import org.springframework.messaging.Message;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * An {@code @Idempotent} batch listener taking {@code List<Message<?>>} behind a record filter
 * ({@code @KafkaListener(filter = ...)}): spring-kafka filters the batch after the container's
 * batch interceptors saw it, so the listener gets fewer messages than the container polled. Each
 * message must still be matched to its own record, and the records kept applied once. A real
 * PostgreSQL and the in-JVM broker.
 */
@SpringBootTest(classes = BatchMessageListFilterTest.App.class)
@DirtiesContext
class BatchMessageListFilterTest {
  static final Duration WAIT = Duration.ofSeconds(15);
  static final String TOPIC = "bmf-orders";
  static final Map<String, AtomicInteger> effects = new ConcurrentHashMap<>();
  static final List<String> batchFailures = new CopyOnWriteArrayList<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "batch_message_filter", TOPIC);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void messagesLeftByTheFilterAreMatchedToTheirOwnRecords() throws Exception {
    SpringTestEnvironment.send(template, TOPIC, "apply", "order-no", "F-1");
    SpringTestEnvironment.send(template, TOPIC, "skip", "order-no", "F-2");
    SpringTestEnvironment.send(template, TOPIC, "apply", "order-no", "F-3");
    containers.getListenerContainer(TOPIC).start();
    await()
        .atMost(WAIT)
        .untilAsserted(
            () -> {
              assertThat(batchFailures).as("batch failures").isEmpty();
              assertThat(status("F-1")).as("F-1 status").isEqualTo(DedupStatus.SUCCESS);
              assertThat(status("F-3")).as("F-3 status").isEqualTo(DedupStatus.SUCCESS);
            });
    assertThat(effects.get("F-1")).as("F-1 applied").hasValue(1);
    assertThat(effects.get("F-3")).as("F-3 applied").hasValue(1);
    assertThat(effects.get("F-2")).as("F-2, filtered out, applied").isNull();
    assertThat(status("F-2")).as("F-2, filtered out, recorded").isNull();
  }

  private DedupStatus status(String orderNo) {
    return store.find(DedupKey.of("bmf", orderNo)).map(DedupRecord::status).orElse(null);
  }

  static class Listener {
    @Idempotent(bizType = "bmf", header = "order-no")
    @KafkaListener(
        id = TOPIC,
        topics = TOPIC,
        batch = "true",
        filter = "skipMarked",
        autoStartup = "false")
    public void onOrders(List<Message<String>> messages) {
      for (Message<String> message : messages) {
        Object key = message.getHeaders().get("order-no");
        String orderNo =
            key instanceof byte[] bytes
                ? new String(bytes, StandardCharsets.UTF_8)
                : String.valueOf(key);
        effects.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
      }
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    RecordFilterStrategy<Object, Object> skipMarked() {
      return record -> "skip".equals(record.value());
    }

    @Bean
    BatchInterceptor<Object, Object> batchFailures() {
      return SpringTestEnvironment.batchFailureRecorder(batchFailures);
    }

    @Bean
    Listener listener() {
      return new Listener();
    }
  }
}
