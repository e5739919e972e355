package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStore;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.BatchInterceptor;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A listener that its container factory makes a batch listener ({@code
 * spring.kafka.listener.type=batch}) without saying so itself (no {@code batch = "true"}, a list of
 * payloads rather than of records): consumer-dedup reads it as a record listener, so it is not
 * refused at start-up as a batch listener of that shape is, and each call finds no record. That
 * must hold the batch, logged with the reason and the remedy, not fail it as the listener's own
 * failure, which spring-kafka's default error handler retries in memory and then discards: the
 * records were committed without the method ever seeing them.
 */
@SpringBootTest(
    classes = BatchContainerFactoryListenerTest.App.class,
    properties = {
      "spring.kafka.listener.type=batch",
      "consumer-dedup.hold.initial-backoff=200ms",
      "consumer-dedup.hold.max-backoff=400ms"
    })
@DirtiesContext
class BatchContainerFactoryListenerTest {
  static final Duration WAIT = Duration.ofSeconds(60);
  static final String TOPIC = "bfac-orders";
  static final List<String> failures = new CopyOnWriteArrayList<>();
  static final AtomicInteger calls = new AtomicInteger();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_batch_factory", TOPIC);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;

  @Test
  void aListenerMadeBatchByItsFactoryIsHeldNotDiscarded() throws Exception {
    send(template, TOPIC, "book 1", "order-no", "BF-1");
    send(template, TOPIC, "book 2", "order-no", "BF-2");

    // Either the batch comes again and again (held), or it is given up and committed.
    await().atMost(WAIT).until(() -> failures.size() >= 3 || committed() > 0);
    assertThat(committed())
        .as(
            "committed past a batch the listener never saw, which failed with: %s",
            failures.stream().findFirst().orElse("nothing"))
        .isLessThanOrEqualTo(0);
    assertThat(failures.get(0))
        .contains(DedupConfigurationException.class.getName())
        .contains("BatchContainerFactoryListenerTest$Listeners#book")
        .contains("is called with a batch")
        .contains("batch = \"true\"");
    assertThat(calls).hasValue(0);
    assertThat(store.find(DedupKey.of("bfac", "BF-1"))).isEmpty();
  }

  private static long committed() throws Exception {
    return SpringTestEnvironment.committed(TOPIC, TOPIC, 0);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listeners listeners() {
      return new Listeners();
    }

    /** Records what each failed batch threw, with every cause. */
    @Bean
    BatchInterceptor<Object, Object> failureRecorder() {
      return SpringTestEnvironment.batchFailureRecorder(failures);
    }
  }

  static class Listeners {
    @Idempotent(bizType = "bfac", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    public void book(List<String> payloads) {
      calls.incrementAndGet();
    }
  }
}
