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
 * The dead-letter handler throws a {@code StackOverflowError} as it writes the dead letter of a
 * record without its key: the Error stops the listener's worker, with no decision for the record.
 * Nothing woke the consumer's keeper then, which replaced the worker only at its next renewal, a
 * third of the 15 s lock later: the record, and every record handed over meanwhile, waited 5 s for
 * nobody. The user expects the dead letter written again at once by the new worker, once, and the
 * record rejected.
 */
@SpringBootTest(classes = ShareListenerDeadLetterErrorTest.App.class)
@DirtiesContext
class ShareListenerDeadLetterErrorTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final Duration LOCK = Duration.ofSeconds(15);
  static final String TOPIC = "share-dlt-error";

  static final List<String> calls = new CopyOnWriteArrayList<>();

  /** When the dead-letter handler was called, in nanoseconds: it throws on the first call. */
  static final List<Long> deadLetterCalls = new CopyOnWriteArrayList<>();

  static final List<ConsumerRecord<String, String>> deadLetters = new CopyOnWriteArrayList<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_share_dlt_error", TOPIC);
    TestShareGroups.configure(TOPIC, LOCK, Duration.ofSeconds(1)); // joins in a second
  }

  @Autowired KafkaTemplate<String, String> template;

  @Test
  void aDeadLetterThatThrowsAnErrorIsWrittenAgainAtOnceByTheNewWorker() throws Exception {
    template.send(new ProducerRecord<>(TOPIC, "charge 1.00, no order-no")).get();

    await().atMost(WAIT).until(() -> deadLetters.size() == 1);
    Duration between = Duration.ofNanos(deadLetterCalls.get(1) - deadLetterCalls.get(0));
    assertThat(between)
        .as("from the dead letter's Error to its next try, by the worker that replaced the first")
        .isLessThan(Duration.ofSeconds(2));
    assertThat(TestShareGroups.remaining(TOPIC, TOPIC, Duration.ofSeconds(2)))
        .as("left in the queue: rejected")
        .isEmpty();
    assertThat(deadLetterCalls).hasSize(2);
    assertThat(calls).as("the listener is not called for a record without its key").isEmpty();
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
  }
}
