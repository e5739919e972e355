package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.readTopic;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.test.context.DynamicPropertyRegistry;

/**
 * What the tests of an {@code @Idempotent} listener whose outcomes never hand over share: an
 * application with {@code consumer-dedup.max-attempts=2} that dead-letters a record once its
 * attempts are spent, and starts a container again whenever the {@code Error} stops it, as after a
 * restart.
 */
final class RepeatedHandOverErrors {
  static final int MAX_ATTEMPTS = 2;
  static final Duration WAIT = Duration.ofSeconds(20);

  private RepeatedHandOverErrors() {}

  /** The schema, the topics and their dead-letter topics, and the properties of the application. */
  static void prepare(DynamicPropertyRegistry registry, String schemaPrefix, String... topics) {
    String[] withDeadLetters = new String[2 * topics.length];
    for (int i = 0; i < topics.length; i++) {
      withDeadLetters[2 * i] = topics[i];
      withDeadLetters[2 * i + 1] = topics[i] + "-dlt";
    }
    SpringTestEnvironment.prepare(registry, schemaPrefix, withDeadLetters);
    registry.add("consumer-dedup.max-attempts", () -> MAX_ATTEMPTS);
    registry.add("consumer-dedup.lease", () -> "2s");
    registry.add("consumer-dedup.hold.initial-backoff", () -> "200ms");
    registry.add("consumer-dedup.hold.max-backoff", () -> "1s");
  }

  /** Dead letters the broker took, per topic of the records. */
  private static final Map<String, AtomicInteger> DEAD_LETTERED = new ConcurrentHashMap<>();

  private static int deadLetteredOf(String topic) {
    AtomicInteger count = DEAD_LETTERED.get(topic);
    return count == null ? 0 : count.get();
  }

  /** How often the Error stopped the container, and what was dead-lettered. */
  record Runs(int stops, List<ConsumerRecord<String, String>> deadLettered) {}

  /**
   * Starts {@code container} again whenever the Error stops it, at most {@code maxStarts} times,
   * until {@code expected} records of {@code topic} are dead-lettered; then stops it.
   */
  static Runs restartUntilDeadLettered(
      MessageListenerContainer container, String topic, int expected, int maxStarts)
      throws InterruptedException {
    List<ConsumerRecord<String, String>> deadLettered = List.of();
    int stops = 0;
    for (int run = 0; run < maxStarts && deadLettered.size() < expected; run++) {
      if (!container.isRunning()) {
        container.start();
      }
      long giveUp = System.nanoTime() + WAIT.toNanos();
      // The last record is dead-lettered while the container runs on: waiting out WAIT after it,
      // only to read the topic then, was most of each test's time.
      while (container.isRunning()
          && System.nanoTime() < giveUp
          && deadLetteredOf(topic) < expected) {
        Thread.sleep(50);
      }
      if (!container.isRunning()) {
        stops++;
      }
      deadLettered = readTopic(topic + "-dlt", expected, Duration.ofSeconds(1));
    }
    container.stop();
    return new Runs(stops, deadLettered);
  }

  /**
   * The application's error handler, imported by the test's application: a few quick retries, then
   * the dead-letter topic.
   */
  static class DeadLettering {
    @Bean
    DefaultErrorHandler errorHandler(KafkaTemplate<Object, Object> template) {
      return SpringTestEnvironment.deadLettering(
          template,
          100,
          3,
          record ->
              DEAD_LETTERED
                  .computeIfAbsent(record.topic(), topic -> new AtomicInteger())
                  .incrementAndGet());
    }
  }
}
