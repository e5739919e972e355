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
 * whose dead letter cannot be written for longer than its acquisition lock, which cannot be
 * renewed: it must not be rejected without its dead letter. The user expects it delivered again
 * once its lock has run out, dead-lettered once the handler takes it, then rejected, and the
 * records after it applied meanwhile.
 */
@SpringBootTest(
    classes = ShareListenerPollRejectedDeadLetterFailsTest.App.class,
    properties = "consumer-dedup.hold.initial-backoff=500ms")
@DirtiesContext
class ShareListenerPollRejectedDeadLetterFailsTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final Duration LOCK = Duration.ofSeconds(4);
  static final String TOPIC = "share-poll-rejected-dlt-fails";

  static final List<String> calls = new CopyOnWriteArrayList<>();
  static final List<ConsumerRecord<byte[], byte[]>> deadLetters = new CopyOnWriteArrayList<>();
  static final AtomicInteger refused = new AtomicInteger();

  /** When the dead-letter handler first refused a record; it refuses for a lock and a half. */
  static final AtomicLong firstRefusal = new AtomicLong();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_share_poll_rejected_dlt", TOPIC);
    TestShareGroups.configure(TOPIC, LOCK);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;

  @Test
  void aRecordThePollRejectsIsNotRejectedWhileItsDeadLetterCannotBeWritten() throws Exception {
    ProducerRecord<String, String> poison =
        new ProducerRecord<>(TOPIC, "K-1", RejectingDeserializer.POISON + " charge 1.00");
    poison.headers().add("order-no", "P-1".getBytes(StandardCharsets.UTF_8));
    template.send(poison).get();
    await().atMost(WAIT).until(() -> refused.get() > 0);
    send(template, TOPIC, "charge 2.00", "order-no", "O-2");

    // Rejected at a refusal, the record would never come again, and no dead letter be written.
    await().atMost(WAIT).until(() -> !deadLetters.isEmpty());
    await().atMost(WAIT).until(() -> SpringTestEnvironment.effects(jdbc, TOPIC, "O-2") == 1);
    assertThat(calls).as("listener calls, by order-no").containsExactly("O-2");
    assertThat(TestShareGroups.remaining(TOPIC, TOPIC, Duration.ofSeconds(2)))
        .as("left in the queue: rejected")
        .isEmpty();
    assertThat(deadLetters).as("dead letters").hasSize(1);
    ConsumerRecord<byte[], byte[]> deadLetter = deadLetters.get(0);
    assertThat(new String(deadLetter.value(), StandardCharsets.UTF_8))
        .isEqualTo(RejectingDeserializer.POISON + " charge 1.00");
    assertThat(refused.get()).as("dead letters refused").isGreaterThan(1);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    ShareKafkaListenerContainerFactory<String, String> shareFactory() {
      return ShareListenerTests.shareFactory(
          ShareListenerTests.consumerConfig(StringDeserializer.class, RejectingDeserializer.class));
    }

    /** Refuses the dead letters of undeserializable records for a lock and a half. */
    @Bean
    DeadLetterHandler<String, String> deadLetterHandler() {
      return ShareListenerTests.undeserializableOnly(
          (record, reason) -> {
            firstRefusal.compareAndSet(0, System.nanoTime());
            if (System.nanoTime() - firstRefusal.get() < LOCK.toNanos() * 3 / 2) {
              refused.incrementAndGet();
              throw new IllegalStateException("injected: dead-letter topic unavailable");
            }
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

    @Idempotent(bizType = "poll-rejected-dlt", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, groupId = TOPIC, containerFactory = "shareFactory")
    public void handle(ConsumerRecord<String, String> record) {
      String orderNo = header(record, "order-no");
      calls.add(orderNo);
      SpringTestEnvironment.effect(jdbc, TOPIC, orderNo, record.value());
    }
  }
}
