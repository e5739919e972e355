package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.internal.FaultPoints;
import io.consumerdedup.kafka.DeadLetterHandler;
import io.consumerdedup.testing.TestShareGroups;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.AfterEach;
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
 * An {@code Error} that repeats (an application short of memory) strikes every time the outcome of
 * an {@code @Idempotent} share listener's record is handed over, the claim's second try too. The
 * record must be neither held "in progress" for good, nor run without end, nor accepted or archived
 * unrecorded: its attempts count, and once they are spent it is dead-lettered, then rejected. A
 * real PostgreSQL and the in-JVM broker's share groups; {@code consumer-dedup.max-attempts=2}.
 */
@SpringBootTest(
    classes = ShareListenerRepeatedHandOverErrorTest.App.class,
    properties = "consumer-dedup.max-attempts=2")
@DirtiesContext
class ShareListenerRepeatedHandOverErrorTest {
  static final Duration WAIT = Duration.ofSeconds(60);
  static final String TOPIC = "share-repeated-handover-error";
  static final int MAX_ATTEMPTS = 2;

  static final AtomicInteger runs = new AtomicInteger();
  static final List<ConsumerRecord<String, String>> deadLetters = new CopyOnWriteArrayList<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_share_handover", TOPIC);
    registry.add("consumer-dedup.lease", () -> "2s");
    TestShareGroups.configure(TOPIC, Duration.ofSeconds(15), Duration.ofSeconds(1));
  }

  @Autowired KafkaTemplate<String, String> template;

  @AfterEach
  void noMoreErrors() {
    FaultPoints.install(null);
  }

  @Test
  void aRecordWhoseOutcomeNeverHandsOverIsDeadLetteredOnceItsAttemptsAreSpent() throws Exception {
    AtomicInteger struck = new AtomicInteger();
    FaultPoints.install(
        point -> {
          if (point == FaultPoints.Point.ENDING && runs.get() > 0) {
            struck.incrementAndGet();
            throw new OutOfMemoryError("Java heap space, handing the outcome over");
          }
        });
    ProducerRecord<String, String> charge = new ProducerRecord<>(TOPIC, "charge 1.00");
    charge.headers().add("order-no", "SHE-1".getBytes(StandardCharsets.UTF_8));
    template.send(charge).get();

    await().atMost(WAIT).alias("the record dead-lettered").until(() -> !deadLetters.isEmpty());
    assertThat(struck).as("hand-overs of an outcome that met the Error").hasPositiveValue();
    assertThat(runs).as("listener runs").hasValueLessThanOrEqualTo(MAX_ATTEMPTS);
    assertThat(TestShareGroups.remaining(TOPIC, TOPIC, Duration.ofSeconds(2)))
        .as("left in the queue: rejected once its dead letter was written")
        .isEmpty();
    assertThat(deadLetters).as("dead letters of the record").hasSize(1);
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
    @Idempotent(bizType = "share-handover", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, groupId = TOPIC, containerFactory = "shareFactory")
    public void handle(ConsumerRecord<String, String> record) {
      runs.incrementAndGet();
    }
  }
}
