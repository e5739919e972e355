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
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
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
 * whose dead-letter topic is slow to fail: each of the first tries outlasts the 3 s acquisition
 * lock, which cannot be renewed, then throws, as a send does whose producer waits for a missing
 * topic's metadata ({@code max.block.ms}, 60 s by default, against the broker's default lock of 30
 * s). Every delivery of such a record reports delivery count 0. The user expects each try to cost
 * one delivery, as in {@code DedupShareLoop}, and the record dead-lettered once the topic accepts
 * it within the broker's 5 deliveries: not released unseen by the failure of the try before it (row
 * 406, a try past one lock), nor superseded by deliveries fetched while a try still runs (row 411,
 * a try past two locks), and archived without its dead letter. Spring Boot 4.0 refuses share
 * listeners, so the boot40 module leaves this class out.
 */
@SpringBootTest(classes = ShareListenerPollRejectedSlowFailingDeadLetterTest.App.class)
@DirtiesContext
class ShareListenerPollRejectedSlowFailingDeadLetterTest {
  static final Duration LOCK = Duration.ofSeconds(3);
  static final String TOPIC = "share-poll-rejected-slow-failing-dlt";

  /**
   * How many tries fail slowly before the topic accepts the dead letter. The consumer fetches
   * nothing while a try that outlasted its lock runs, so each try costs one delivery and the fourth
   * is written within the broker's 5; at one try per two deliveries, or three per try past two
   * locks, the record was archived after the third without its dead letter.
   */
  static final int SLOW_FAILURES = 3;

  /** How long each failing try takes; set by the test before it sends its record. */
  static volatile Duration failingTryTakes = Duration.ZERO;

  static final AtomicInteger tries = new AtomicInteger();

  /** Deliveries of the undeserializable record: each poll that threw for it. */
  static final AtomicInteger deliveries = new AtomicInteger();

  static final List<ConsumerRecord<byte[], byte[]>> deadLetters = new CopyOnWriteArrayList<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_share_poll_rejected_slow_failing", TOPIC);
    TestShareGroups.configure(TOPIC, LOCK, Duration.ofSeconds(1)); // joins in a second
  }

  @Autowired KafkaTemplate<String, String> template;

  /**
   * Past one lock (4.5 s), and past two (6.6 s): the try still runs as two more could be fetched.
   */
  @ParameterizedTest(name = "each failing try takes {0} ms")
  @ValueSource(longs = {4_500, 6_600})
  void eachDeliveryOfARejectedRecordGetsItsOwnDeadLetterTry(long takesMillis) throws Exception {
    failingTryTakes = Duration.ofMillis(takesMillis);
    tries.set(0);
    deliveries.set(0);
    deadLetters.clear();
    String value = RejectingDeserializer.POISON + " charge " + takesMillis;
    ProducerRecord<String, String> poison = new ProducerRecord<>(TOPIC, "K-1", value);
    poison.headers().add("order-no", ("P-" + takesMillis).getBytes(StandardCharsets.UTF_8));
    long sent = System.nanoTime();
    template.send(poison).get();

    // Tries one failing try's time apart, one delivery each: the fourth writes it. Archived
    // without it, nothing more comes.
    Duration wait = failingTryTakes.multipliedBy(SLOW_FAILURES + 2);
    await()
        .atMost(wait.plusSeconds(5))
        .until(() -> !deadLetters.isEmpty() || System.nanoTime() - sent > wait.toNanos());
    Thread.sleep(LOCK.toMillis()); // a second dead letter, had there been one
    assertThat(deadLetters)
        .as(
            "dead letters of the undeserializable record (%d deliveries, %d tries)",
            deliveries.get(), tries.get())
        .hasSize(1);
    assertThat(new String(deadLetters.get(0).value(), StandardCharsets.UTF_8)).isEqualTo(value);
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

    /** Fails slowly, past the lock, as a dead-letter topic timing out would, then accepts. */
    @Bean
    DeadLetterHandler<String, String> deadLetterHandler() {
      return ShareListenerTests.slowlyFailingDeadLetters(
          tries, SLOW_FAILURES, () -> failingTryTakes, deadLetters);
    }

    @Bean
    Listener listener() {
      return new Listener();
    }
  }

  static class Listener {
    @Idempotent(bizType = "poll-rejected-slow-failing-dlt", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, groupId = TOPIC, containerFactory = "shareFactory")
    public void handle(ConsumerRecord<String, String> record) {
      throw new AssertionError("the listener is not called with an undeserializable record");
    }
  }
}
