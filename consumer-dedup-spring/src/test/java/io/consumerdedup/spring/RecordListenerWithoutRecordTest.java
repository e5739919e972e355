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
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.AbstractMessageListenerContainer;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A record listener whose container hands it no record: it takes no {@code ConsumerRecord}, and its
 * container does not run consumer-dedup's {@code CurrentRecordInterceptor} (here the application
 * set its own record interceptor after consumer-dedup prepared the container, which replaced
 * consumer-dedup's). That must hold the record, logged with the reason and the remedy, not fail it
 * as the listener's own failure, which the error handler retries and then gives up, committing a
 * record the method never saw.
 */
@SpringBootTest(
    classes = RecordListenerWithoutRecordTest.App.class,
    properties = {
      "consumer-dedup.hold.initial-backoff=200ms",
      "consumer-dedup.hold.max-backoff=400ms"
    })
@DirtiesContext
@ExtendWith(OutputCaptureExtension.class)
class RecordListenerWithoutRecordTest {
  static final Duration WAIT = Duration.ofSeconds(120);
  static final String TOPIC = "norec-orders";
  static final List<String> failures = new CopyOnWriteArrayList<>();
  static final AtomicInteger calls = new AtomicInteger();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_no_record", TOPIC);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry registry;

  @Test
  void aListenerGivenNoRecordHoldsItNotDiscardsIt(CapturedOutput output) throws Exception {
    @SuppressWarnings("unchecked")
    AbstractMessageListenerContainer<Object, Object> container =
        (AbstractMessageListenerContainer<Object, Object>) registry.getListenerContainer(TOPIC);
    container.setRecordInterceptor(SpringTestEnvironment.failureRecorder(failures));
    container.start();
    send(template, TOPIC, "book 1", "order-no", "NR-1");

    // Either the record comes again and again (held), or it is given up and committed: a
    // DefaultErrorHandler gives up after 10 tries.
    await().atMost(WAIT).until(() -> failures.size() > 10 || committed() > 0);
    assertThat(committed())
        .as(
            "committed past a record the listener never saw, which failed with: %s",
            failures.stream().findFirst().orElse("nothing"))
        .isLessThanOrEqualTo(0);
    assertThat(failures.get(0))
        .contains(DedupConfigurationException.class.getName())
        .contains("RecordListenerWithoutRecordTest$Listeners#book")
        .contains("was called without a record")
        .contains("DedupContainers.configure(container)");
    assertThat(output.getAll())
        .contains("ERROR")
        .contains("cannot be handled now; not committing past it");
    assertThat(calls).hasValue(0);
    assertThat(store.find(DedupKey.of("norec", "NR-1"))).isEmpty();
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
  }

  static class Listeners {
    @Idempotent(bizType = "norec", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, autoStartup = "false")
    public void book(String payload) {
      calls.incrementAndGet();
    }
  }
}
