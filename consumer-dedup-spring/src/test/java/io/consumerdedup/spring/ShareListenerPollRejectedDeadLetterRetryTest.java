package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.kafka.DeadLetterHandler;
import io.consumerdedup.testing.TestShareGroups;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ShareKafkaListenerContainerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A record the share listener's consumer cannot deserialize (no {@code ErrorHandlingDeserializer})
 * whose dead letter fails a few times in a row under a long acquisition lock, which cannot be
 * renewed. The user expects it tried again while its lock leaves time, then released for its next
 * delivery before the lock runs out, not left to the lock (its consumer polling nothing meanwhile):
 * dead-lettered once, then rejected, and the record after it applied, all well within the lock;
 * never rejected without its dead letter.
 */
@SpringBootTest(
    classes = ShareListenerPollRejectedDeadLetterRetryTest.App.class,
    properties = "consumer-dedup.hold.initial-backoff=1s")
@DirtiesContext
class ShareListenerPollRejectedDeadLetterRetryTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final Duration LOCK = Duration.ofSeconds(10);
  static final String TOPIC = "share-poll-rejected-dlt-retry";

  static final List<String> calls = new CopyOnWriteArrayList<>();
  static final List<ConsumerRecord<byte[], byte[]>> deadLetters = new CopyOnWriteArrayList<>();
  static final AtomicInteger refused = new AtomicInteger();

  /** How many dead letters the handler refuses before it writes one. */
  static final int REFUSALS = 4;

  /** When the dead-letter handler first refused a record, and when it wrote one. */
  static final AtomicLong firstRefusal = new AtomicLong();

  static final AtomicLong deadLetterWritten = new AtomicLong();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_share_poll_rejected_dlt_retry", TOPIC);
    TestShareGroups.configure(TOPIC, LOCK, Duration.ofSeconds(1)); // joins in a second
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;

  @Test
  void aRecordThePollRejectsWhoseDeadLetterKeepsFailingIsReleasedBeforeItsLockRunsOut()
      throws Exception {
    ProducerRecord<String, String> poison =
        new ProducerRecord<>(TOPIC, "K-1", RejectingDeserializer.POISON + " charge 1.00");
    poison.headers().add("order-no", "P-1".getBytes(StandardCharsets.UTF_8));
    template.send(poison).get();
    await().atMost(WAIT).until(() -> refused.get() > 0);
    long start = firstRefusal.get();
    send(template, TOPIC, "charge 2.00", "order-no", "O-2");

    // Tried at 0, 1 and 3 s on its first delivery, then released, since a try at 7 s and the
    // release after it would not fit in the 10 s lock; refused once more on its second delivery
    // and written a second later. Left to its lock, it waited for the lock to run out.
    await().atMost(WAIT).until(() -> !deadLetters.isEmpty());
    assertThat(Duration.ofNanos(deadLetterWritten.get() - start))
        .as("dead letter written after the first refusal, under a lock of %s", LOCK)
        .isLessThan(LOCK.multipliedBy(4).dividedBy(5));
    await().atMost(WAIT).until(() -> SpringTestEnvironment.effects(jdbc, TOPIC, "O-2") == 1);
    assertThat(refused.get()).as("dead letters refused").isEqualTo(REFUSALS);
    assertThat(calls).as("listener calls, by order-no").containsExactly("O-2");
    assertThat(TestShareGroups.remaining(TOPIC, TOPIC, Duration.ofSeconds(2)))
        .as("left in the queue: rejected")
        .isEmpty();
    assertThat(deadLetters).as("dead letters").hasSize(1);
    assertThat(new String(deadLetters.get(0).value(), StandardCharsets.UTF_8))
        .isEqualTo(RejectingDeserializer.POISON + " charge 1.00");
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    ShareKafkaListenerContainerFactory<String, String> shareFactory() {
      return ShareListenerTests.shareFactory(
          ShareListenerTests.consumerConfig(StringDeserializer.class, RejectingDeserializer.class));
    }

    /** Refuses the first dead letters of undeserializable records at once. */
    @Bean
    DeadLetterHandler<String, String> deadLetterHandler() {
      return ShareListenerTests.undeserializableOnly(
          (record, reason) -> {
            firstRefusal.compareAndSet(0, System.nanoTime());
            if (refused.get() < REFUSALS) {
              refused.incrementAndGet();
              throw new IllegalStateException("injected: dead-letter topic unavailable");
            }
            deadLetterWritten.compareAndSet(0, System.nanoTime());
            deadLetters.add(record);
          });
    }

    @Bean
    Listener listener(JdbcTemplate jdbc) {
      return new Listener(jdbc);
    }
  }

  static class Listener {
    private final JdbcTemplate jdbc;

    Listener(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = "poll-rejected-dlt-retry", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, groupId = TOPIC, containerFactory = "shareFactory")
    public void handle(ConsumerRecord<String, String> record) {
      String orderNo = header(record, "order-no");
      calls.add(orderNo);
      SpringTestEnvironment.effect(jdbc, TOPIC, orderNo, record.value());
    }
  }
}
