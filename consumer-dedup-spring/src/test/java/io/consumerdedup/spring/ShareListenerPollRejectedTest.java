package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.readTopic;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.testing.TestShareGroups;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
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
 * An {@code @Idempotent} share listener whose consumer's deserializers throw for a poison key or
 * value, with no {@code ErrorHandlingDeserializer} around them: the consumer's poll throws for such
 * a record, and spring-kafka 4.1's share container rejects it by offset, with no dead letter. The
 * user expects each in the dead-letter topic, with the bytes it was sent with and the
 * deserializer's error, the listener never called with it, and the records around them applied
 * once.
 */
@SpringBootTest(classes = ShareListenerPollRejectedTest.App.class)
@DirtiesContext
class ShareListenerPollRejectedTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final String TOPIC = "share-poll-rejected";

  /** The order-no header of each call of the listener. */
  static final List<String> calls = new CopyOnWriteArrayList<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_share_poll_rejected", TOPIC, TOPIC + "-dlt");
    TestShareGroups.configure(
        TOPIC, Duration.ofSeconds(5), Duration.ofSeconds(1)); // joins in a second
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;

  @Test
  void recordsThePollRejectsAreDeadLetteredWithTheirBytesBeforeTheyAreRejected() throws Exception {
    ShareListenerTests.sendOrdersAroundPoisonKeyAndValue(template, TOPIC);

    await().atMost(WAIT).until(() -> SpringTestEnvironment.effects(jdbc, TOPIC, "O-4") == 1);
    assertThat(SpringTestEnvironment.effects(jdbc, TOPIC, "O-1")).isEqualTo(1);
    ShareListenerTests.assertPoisonKeyAndValueDeadLettered(TOPIC, WAIT);
    assertThat(calls).as("listener calls, by order-no").containsExactlyInAnyOrder("O-1", "O-4");
    assertThat(
            jdbc.queryForList(
                "SELECT biz_key FROM consumer_dedup WHERE status = 'SUCCESS' ORDER BY biz_key",
                String.class))
        .as("keys SUCCESS")
        .containsExactly("O-1", "O-4");
    assertThat(TestShareGroups.remaining(TOPIC, TOPIC, Duration.ofSeconds(2)))
        .as("left in the queue: rejected")
        .isEmpty();
    assertThat(readTopic(TOPIC + "-dlt", 3, Duration.ofSeconds(1))).as("dead letters").hasSize(2);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    /** Read by deserializers that throw, with no ErrorHandlingDeserializer around them. */
    @Bean
    ShareKafkaListenerContainerFactory<String, String> shareFactory() {
      Map<String, Object> config =
          ShareListenerTests.consumerConfig(
              RejectingDeserializer.class, RejectingDeserializer.class);
      config.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 10);
      return ShareListenerTests.shareFactory(config);
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

    @Idempotent(bizType = "poll-rejected", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, groupId = TOPIC, containerFactory = "shareFactory")
    public void handle(ConsumerRecord<String, String> record) {
      String orderNo = header(record, "order-no");
      calls.add(orderNo);
      SpringTestEnvironment.effect(jdbc, TOPIC, orderNo, record.value());
    }
  }
}
