package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.kafka.DeadLetterHandler;
import io.consumerdedup.testing.TestShareGroups;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
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
import org.springframework.kafka.config.ShareKafkaListenerContainerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * The dead-letter handler throws a {@code StackOverflowError} as it writes the dead letter of a
 * record without its key. That Error once stopped the listener's worker, with no decision for the
 * record, and the worker was replaced only at the keeper's next renewal, a third of the 15 s lock
 * later. The user expects the dead letter tried again soon (after the hold back-off, 1 s), written
 * once, and the record rejected.
 *
 * <p>A dead letter that throws an Error on every try (a serializer that overflows its stack on the
 * record, memory short for a large one) stopped each worker: the new one took the record at once
 * and met the Error again, hundreds of times a second, each time an ERROR with its stack trace
 * saying the listener had thrown. The user expects a failed try like any other: tried again after
 * the hold back-off, the record kept acquired.
 */
@SpringBootTest(classes = ShareListenerDeadLetterErrorTest.App.class)
@DirtiesContext
@ExtendWith(OutputCaptureExtension.class)
class ShareListenerDeadLetterErrorTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final Duration LOCK = Duration.ofSeconds(15);
  static final String TOPIC = "share-dlt-error";
  static final String ALWAYS = "share-dlt-error-always";

  static final List<String> calls = new CopyOnWriteArrayList<>();

  /** When the dead-letter handler was called, in nanoseconds: it throws on the first call. */
  static final List<Long> deadLetterCalls = new CopyOnWriteArrayList<>();

  static final List<ConsumerRecord<String, String>> deadLetters = new CopyOnWriteArrayList<>();

  /** When the dead-letter handler was called for a record of {@link #ALWAYS}, in nanoseconds. */
  static final List<Long> alwaysCalls = new CopyOnWriteArrayList<>();

  static final List<ConsumerRecord<String, String>> alwaysDeadLetters =
      new CopyOnWriteArrayList<>();

  /** Whether the dead-letter handler throws for the records of {@link #ALWAYS}. */
  static volatile boolean alwaysThrows = true;

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_share_dlt_error", TOPIC, ALWAYS);
    TestShareGroups.configure(TOPIC, LOCK, Duration.ofSeconds(1)); // joins in a second
    TestShareGroups.configure(ALWAYS, LOCK, Duration.ofSeconds(1));
  }

  @Autowired KafkaTemplate<String, String> template;

  @Test
  void aDeadLetterThatThrowsAnErrorOnceIsWrittenOnItsNextTry() throws Exception {
    template.send(new ProducerRecord<>(TOPIC, "charge 1.00, no order-no")).get();

    await().atMost(WAIT).until(() -> deadLetters.size() == 1);
    Duration between = Duration.ofNanos(deadLetterCalls.get(1) - deadLetterCalls.get(0));
    assertThat(between)
        .as("from the dead letter's Error to its next try")
        .isLessThan(Duration.ofSeconds(2));
    assertThat(TestShareGroups.remaining(TOPIC, TOPIC, Duration.ofSeconds(2)))
        .as("left in the queue: rejected")
        .isEmpty();
    assertThat(deadLetterCalls).hasSize(2);
    assertThat(calls).as("the listener is not called for a record without its key").isEmpty();
  }

  @Test
  void aDeadLetterThatKeepsThrowingAnErrorIsTriedAgainAfterTheHoldBackOff(CapturedOutput output)
      throws Exception {
    template.send(new ProducerRecord<>(ALWAYS, "charge 2.00, no order-no")).get();

    await().atMost(WAIT).until(() -> !alwaysCalls.isEmpty());
    long first = alwaysCalls.get(0);
    long window = Duration.ofMillis(2_500).toNanos();
    await().atMost(WAIT).until(() -> System.nanoTime() - first > window);
    assertThat(alwaysCalls.stream().filter(at -> at - first <= window).count())
        .as("tries of the dead letter in the 2.5 s from its first Error (hold back-off 1 s)")
        .isLessThanOrEqualTo(3);
    assertThat(output.getAll())
        .as("the log does not blame the listener for the dead-letter handler's Error")
        .doesNotContain("Share listener " + ALWAYS + " threw");

    alwaysThrows = false;
    await().atMost(WAIT).until(() -> alwaysDeadLetters.size() == 1);
    assertThat(TestShareGroups.remaining(ALWAYS, ALWAYS, Duration.ofSeconds(2)))
        .as("left in the queue: rejected once its dead letter was written")
        .isEmpty();
    assertThat(alwaysDeadLetters.size()).as("dead letters of the record").isEqualTo(1);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    ShareKafkaListenerContainerFactory<String, String> shareFactory() {
      return ShareListenerTests.stringShareFactory();
    }

    @Bean
    DeadLetterHandler<String, String> deadLetterHandler() {
      return new DeadLetterHandler<>() {
        @Override
        public void deadLetter(ConsumerRecord<String, String> record, Exception reason) {
          if (record.topic().equals(ALWAYS)) {
            alwaysCalls.add(System.nanoTime());
            if (alwaysThrows) {
              throw new StackOverflowError("the dead letter's serializer recursed too deep");
            }
            alwaysDeadLetters.add(record);
            return;
          }
          deadLetterCalls.add(System.nanoTime());
          if (deadLetterCalls.size() == 1) {
            throw new StackOverflowError("deep recursion in the dead-letter handler");
          }
          deadLetters.add(record);
        }

        @Override
        public void deadLetterUndeserializable(
            ConsumerRecord<byte[], byte[]> record, Exception reason) {
          throw new AssertionError("no undeserializable record expected: " + record, reason);
        }
      };
    }

    @Bean
    Listener listener() {
      return new Listener();
    }
  }

  static class Listener {
    @Idempotent(bizType = "dlt-error", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, groupId = TOPIC, containerFactory = "shareFactory")
    public void handle(ConsumerRecord<String, String> record) {
      calls.add(record.value());
    }

    @Idempotent(bizType = "dlt-error-always", header = "order-no")
    @KafkaListener(
        id = ALWAYS,
        topics = ALWAYS,
        groupId = ALWAYS,
        containerFactory = "shareFactory")
    public void handleAlways(ConsumerRecord<String, String> record) {
      calls.add(record.value());
    }
  }
}
