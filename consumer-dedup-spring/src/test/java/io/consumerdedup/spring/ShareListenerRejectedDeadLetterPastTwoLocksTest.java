package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.kafka.DeadLetterHandler;
import io.consumerdedup.testing.TestShareGroups;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ShareKafkaListenerContainerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A record the share listener's consumer cannot deserialize (no {@code ErrorHandlingDeserializer}),
 * whose dead-letter sends each take more than two of the 3 s acquisition locks before they fail, as
 * a send does whose producer waits for a missing topic's metadata ({@code max.block.ms}, 60 s by
 * default, against the broker's default lock of 30 s). The user expects each try to cost one
 * delivery, as in {@code DedupShareLoop}, and the dead letter written once the topic takes it
 * within the broker's 5 deliveries, not the record archived without it. Spring Boot 4.0 refuses
 * share listeners, so the boot40 module leaves this class out.
 */
@SpringBootTest(classes = ShareListenerRejectedDeadLetterPastTwoLocksTest.App.class)
@DirtiesContext
class ShareListenerRejectedDeadLetterPastTwoLocksTest {
  static final Duration LOCK = Duration.ofSeconds(3);
  static final String TOPIC = "share-rejected-dlt-past-two-locks";

  /** More than two locks: two more deliveries would be fetched while it runs. */
  static final Duration FAILING_TRY_TAKES = Duration.ofMillis(6_600);

  /** Tries that fail slowly before the topic takes the dead letter: a fourth fits in 5. */
  static final int SLOW_FAILURES = 3;

  static final Duration WAIT = Duration.ofSeconds(40);

  static final AtomicInteger tries = new AtomicInteger();

  /** Deliveries of the undeserializable record: each poll that threw for it. */
  static final AtomicInteger deliveries = new AtomicInteger();

  static final List<ConsumerRecord<byte[], byte[]>> deadLetters = new CopyOnWriteArrayList<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_share_rejected_dlt_two_locks", TOPIC);
    TestShareGroups.configure(TOPIC, LOCK);
  }

  @Autowired KafkaTemplate<String, String> template;

  @Test
  void eachSlowFailingDeadLetterTryCostsOneDeliveryAndTheDeadLetterIsWritten() throws Exception {
    ProducerRecord<String, String> poison =
        new ProducerRecord<>(TOPIC, "K-1", RejectingDeserializer.POISON + " charge 2.00");
    poison.headers().add("order-no", "P-1".getBytes(StandardCharsets.UTF_8));
    long sent = System.nanoTime();
    template.send(poison).get();

    // Tries at 0, 6.6, 13.2 and 19.8 s, one delivery each: written about 20 s after the first.
    await()
        .atMost(WAIT.plusSeconds(5))
        .until(() -> !deadLetters.isEmpty() || System.nanoTime() - sent > WAIT.toNanos());
    Thread.sleep(LOCK.toMillis()); // a second dead letter, had there been one
    assertThat(deadLetters)
        .as(
            "dead letters of the undeserializable record (%d deliveries, %d tries)",
            deliveries.get(), tries.get())
        .hasSize(1);
    assertThat(new String(deadLetters.get(0).value(), StandardCharsets.UTF_8))
        .isEqualTo(RejectingDeserializer.POISON + " charge 2.00");
    assertThat(tries.get()).as("dead-letter tries").isEqualTo(SLOW_FAILURES + 1);
    assertThat(deliveries.get()).as("deliveries").isEqualTo(SLOW_FAILURES + 1);
    assertThat(TestShareGroups.remaining(TOPIC, TOPIC, Duration.ofSeconds(2)))
        .as("left in the queue")
        .isEmpty();
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    ShareKafkaListenerContainerFactory<String, String> shareFactory() {
      return ShareListenerTests.countingRejectedDeliveries(deliveries);
    }

    /** Fails after more than two locks, as a send waiting for a topic's metadata, then takes it. */
    @Bean
    DeadLetterHandler<String, String> deadLetterHandler() {
      return ShareListenerTests.slowlyFailingDeadLetters(
          tries, SLOW_FAILURES, FAILING_TRY_TAKES, deadLetters);
    }

    @Bean
    Listener listener() {
      return new Listener();
    }
  }

  static class Listener {
    @Idempotent(bizType = "rejected-dlt-past-two-locks", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, groupId = TOPIC, containerFactory = "shareFactory")
    public void handle(ConsumerRecord<String, String> record) {
      throw new AssertionError("the listener is not called with an undeserializable record");
    }
  }
}
