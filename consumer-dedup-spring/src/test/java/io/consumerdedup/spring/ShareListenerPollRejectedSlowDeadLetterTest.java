package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.kafka.DeadLetterHandler;
import io.consumerdedup.testing.TestKafka;
import io.consumerdedup.testing.TestShareGroups;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.Future;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ShareKafkaListenerContainerFactory;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A record the share listener's consumer cannot deserialize (no {@code ErrorHandlingDeserializer}),
 * fetched together with a healthy order behind it, whose dead letter takes between two thirds and
 * all of the 3 s acquisition lock. kafka-clients keeps the healthy record in its buffer meanwhile,
 * where its lock cannot be renewed, running from the fetch. The user expects that order handed to
 * the listener and applied on its first delivery, its lock kept while the listener runs: not lost
 * and delivered again, a delivery spent. Spring Boot 4.0 refuses share listeners, so the boot40
 * module leaves this class out.
 */
@SpringBootTest(classes = ShareListenerPollRejectedSlowDeadLetterTest.App.class)
@DirtiesContext
class ShareListenerPollRejectedSlowDeadLetterTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final Duration LOCK = Duration.ofSeconds(3);
  static final String TOPIC = "share-poll-rejected-slow-dlt";

  /** Between two thirds and all of the lock. */
  static final Duration DEAD_LETTER_TAKES = Duration.ofMillis(2_300);

  /** Past the healthy record's lock, had it not been renewed in time. */
  static final Duration LISTENER_TAKES = Duration.ofMillis(1_500);

  /** The order-no header of each call of the listener, with its delivery count. */
  static final List<String> calls = new CopyOnWriteArrayList<>();

  /** Each record the consumer's polls returned, as offset/delivery count. */
  static final List<String> polled = new CopyOnWriteArrayList<>();

  static final List<ConsumerRecord<byte[], byte[]>> deadLetters = new CopyOnWriteArrayList<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_share_poll_rejected_slow_dlt", TOPIC);
    TestShareGroups.configure(TOPIC, LOCK, Duration.ofSeconds(1)); // joins in a second
  }

  @Autowired JdbcTemplate jdbc;

  @Test
  void aRecordFetchedBehindARejectedOneWhoseDeadLetterIsSlowKeepsItsLock() throws Exception {
    // In one batch, as a busy producer sends them: the broker acquires them in one fetch.
    try (KafkaProducer<String, String> producer =
        new KafkaProducer<>(
            Map.of(
                ProducerConfig.BOOTSTRAP_SERVERS_CONFIG,
                TestKafka.bootstrapServers(),
                ProducerConfig.LINGER_MS_CONFIG,
                200),
            new StringSerializer(),
            new StringSerializer())) {
      ProducerRecord<String, String> poison =
          new ProducerRecord<>(TOPIC, "K-1", RejectingDeserializer.POISON + " charge 1.00");
      poison.headers().add("order-no", "P-1".getBytes(StandardCharsets.UTF_8));
      ProducerRecord<String, String> healthy = new ProducerRecord<>(TOPIC, "K-2", "charge 2.00");
      healthy.headers().add("order-no", "O-2".getBytes(StandardCharsets.UTF_8));
      Future<?> first = producer.send(poison);
      Future<?> second = producer.send(healthy);
      producer.flush();
      first.get();
      second.get();
    }

    await().atMost(WAIT).until(() -> SpringTestEnvironment.effects(jdbc, TOPIC, "O-2") == 1);
    Thread.sleep(LOCK.plusSeconds(1).toMillis()); // time to deliver it again, had its lock run out
    assertThat(deadLetters).as("dead letters of the undeserializable record").hasSize(1);
    assertThat(polled)
        .as("the records the consumer's polls returned (offset/delivery): the healthy one at 1")
        .doesNotContain("1/2");
    assertThat(calls).as("listener calls, by order-no/delivery").containsExactly("O-2/1");
    assertThat(TestShareGroups.remaining(TOPIC, TOPIC, Duration.ofSeconds(2)))
        .as("left in the queue")
        .isEmpty();
  }

  /** Notes each record its polls return, as offset/delivery count. */
  static ShareConsumer<String, String> noting(ShareConsumer<String, String> consumer) {
    return ShareListenerTests.watchingPolls(
        consumer,
        records -> {
          for (ConsumerRecord<?, ?> record : records) {
            polled.add(record.offset() + "/" + record.deliveryCount().orElse((short) 0));
          }
        },
        thrown -> {});
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    ShareKafkaListenerContainerFactory<String, String> shareFactory() {
      return ShareListenerTests.shareFactory(
          ShareListenerTests.consumerConfig(StringDeserializer.class, RejectingDeserializer.class),
          ShareListenerPollRejectedSlowDeadLetterTest::noting);
    }

    /** Writes the dead letter of an undeserializable record slowly, as a loaded broker would. */
    @Bean
    DeadLetterHandler<String, String> deadLetterHandler() {
      return ShareListenerTests.undeserializableOnly(
          (record, reason) -> {
            try {
              Thread.sleep(DEAD_LETTER_TAKES.toMillis());
            } catch (InterruptedException e) {
              Thread.currentThread().interrupt();
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

    @Idempotent(bizType = "poll-rejected-slow-dlt", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, groupId = TOPIC, containerFactory = "shareFactory")
    public void handle(ConsumerRecord<String, String> record) throws InterruptedException {
      String orderNo = header(record, "order-no");
      calls.add(orderNo + "/" + record.deliveryCount().orElse((short) 0));
      Thread.sleep(LISTENER_TAKES.toMillis());
      SpringTestEnvironment.effect(jdbc, TOPIC, orderNo, record.value());
    }
  }
}
