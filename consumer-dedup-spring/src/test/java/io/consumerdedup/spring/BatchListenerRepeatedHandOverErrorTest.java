package io.consumerdedup.spring;

import static io.consumerdedup.spring.RepeatedHandOverErrors.MAX_ATTEMPTS;
import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.internal.FaultPoints;
import io.consumerdedup.testing.HandOverErrors;
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
import org.springframework.context.annotation.Import;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.KafkaTemplate;
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
@SpringBootTest(classes = BatchListenerRepeatedHandOverErrorTest.App.class)
@DirtiesContext
class BatchListenerRepeatedHandOverErrorTest {
  static final String TOPIC = "bhe-orders";
  static final Map<String, AtomicInteger> runs = new ConcurrentHashMap<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    RepeatedHandOverErrors.prepare(registry, "spring_batch_repeated_handover", TOPIC);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired KafkaListenerEndpointRegistry containers;

  @AfterEach
  void noMoreErrors() {
    FaultPoints.install(null);
  }

  @Test
  void everyRecordOfAFailedBatchWhoseOutcomesNeverHandOverCountsItsAttempts() throws Exception {
    AtomicInteger struck =
        HandOverErrors.strikeWhen(
            () -> !runs.isEmpty() && Thread.currentThread().getName().startsWith(TOPIC));
    send(template, TOPIC, "payload", "order-no", "B-1");
    send(template, TOPIC, "payload", "order-no", "B-2");

    // The first start finds both records in one poll.
    RepeatedHandOverErrors.Runs restarts =
        RepeatedHandOverErrors.restartUntilDeadLettered(
            containers.getListenerContainer(TOPIC), TOPIC, 2, 4 * MAX_ATTEMPTS + 2);

    assertThat(struck).as("hand-overs of an outcome that met the Error").hasPositiveValue();
    assertThat(restarts.stops()).as("container stops on the Error").isPositive();
    assertThat(runs)
        .as("listener runs of each record")
        .allSatisfy(
            (orderNo, count) ->
                assertThat(count.get()).as(orderNo).isLessThanOrEqualTo(MAX_ATTEMPTS));
    assertThat(restarts.deadLettered())
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
  @Import(RepeatedHandOverErrors.DeadLettering.class)
  static class App {
    @Bean
    Listener listener() {
      return new Listener();
    }
  }
}
