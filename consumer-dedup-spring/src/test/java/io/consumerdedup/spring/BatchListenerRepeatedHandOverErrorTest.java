package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.readTopic;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.internal.FaultPoints;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * An {@code @Idempotent} batch listener fails without naming a record, so every record of the batch
 * is failed; an {@code Error} that repeats (an application short of memory) strikes every time an
 * outcome is handed over. The container stops on it and the application starts it again, as after a
 * restart. Every record's attempt must count: each runs at most {@code max-attempts} times, then is
 * dead-lettered. A real PostgreSQL and the in-JVM broker; {@code consumer-dedup.max-attempts=2}.
 */
@SpringBootTest(
    classes = BatchListenerRepeatedHandOverErrorTest.App.class,
    properties = "consumer-dedup.max-attempts=2")
@DirtiesContext
class BatchListenerRepeatedHandOverErrorTest {
  static final Duration WAIT = Duration.ofSeconds(20);
  static final String TOPIC = "bhe-orders";
  static final int MAX_ATTEMPTS = 2;
  static final Map<String, AtomicInteger> runs = new ConcurrentHashMap<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry, "spring_batch_repeated_handover", TOPIC, TOPIC + "-dlt");
    registry.add("consumer-dedup.lease", () -> "2s");
    registry.add("consumer-dedup.hold.initial-backoff", () -> "200ms");
    registry.add("consumer-dedup.hold.max-backoff", () -> "1s");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired KafkaListenerEndpointRegistry containers;

  @AfterEach
  void noMoreErrors() {
    FaultPoints.install(null);
  }

  @Test
  void everyRecordOfAFailedBatchWhoseOutcomesNeverHandOverCountsItsAttempts() throws Exception {
    AtomicInteger struck = new AtomicInteger();
    FaultPoints.install(
        point -> {
          if (point == FaultPoints.Point.ENDING
              && !runs.isEmpty()
              && Thread.currentThread().getName().startsWith(TOPIC)) {
            struck.incrementAndGet();
            throw new OutOfMemoryError("Java heap space, handing the outcome over");
          }
        });
    send(template, TOPIC, "payload", "order-no", "B-1");
    send(template, TOPIC, "payload", "order-no", "B-2");
    MessageListenerContainer container = containers.getListenerContainer(TOPIC);
    List<ConsumerRecord<String, String>> deadLettered = List.of();
    int stops = 0;
    // The application starts the container again whenever the Error stops it.
    for (int run = 0; run < 4 * MAX_ATTEMPTS + 2 && deadLettered.size() < 2; run++) {
      if (!container.isRunning()) {
        container.start(); // both records in one poll at first
      }
      long giveUp = System.nanoTime() + WAIT.toNanos();
      while (container.isRunning() && System.nanoTime() < giveUp) {
        Thread.sleep(50);
      }
      if (!container.isRunning()) {
        stops++;
      }
      deadLettered = readTopic(TOPIC + "-dlt", 2, Duration.ofSeconds(1));
    }
    container.stop();

    assertThat(struck).as("hand-overs of an outcome that met the Error").hasPositiveValue();
    assertThat(stops).as("container stops on the Error").isPositive();
    assertThat(runs)
        .as("listener runs of each record")
        .allSatisfy(
            (orderNo, count) ->
                assertThat(count.get()).as(orderNo).isLessThanOrEqualTo(MAX_ATTEMPTS));
    assertThat(deadLettered)
        .as("records dead-lettered")
        .extracting(record -> header(record, "order-no"))
        .containsExactlyInAnyOrder("B-1", "B-2");
  }

  static class Listener {
    @Idempotent(bizType = TOPIC, header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, batch = "true", autoStartup = "false")
    public void declined(List<ConsumerRecord<String, String>> records) {
      records.forEach(
          record ->
              runs.computeIfAbsent(header(record, "order-no"), k -> new AtomicInteger())
                  .incrementAndGet());
      throw new IllegalStateException("declined, no record named");
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    DefaultErrorHandler errorHandler(KafkaTemplate<Object, Object> template) {
      return SpringTestEnvironment.deadLettering(template, 100, 3);
    }

    @Bean
    Listener listener() {
      return new Listener();
    }
  }
}
