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
import org.springframework.kafka.support.serializer.ErrorHandlingDeserializer;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * An {@code @Idempotent} share listener whose consumers read keys and values through spring-kafka's
 * {@code ErrorHandlingDeserializer}, as spring-kafka advises: a record whose value or key the
 * delegate rejects comes to the listener with a null in its place and the failure in a header,
 * since spring-kafka 4.1's share container does not look at that header. The user expects such a
 * record in the dead-letter topic at once, with the bytes it was sent with and the delegate's
 * error, the listener never called with it, its key not SUCCESS, and the records around it applied
 * once.
 */
@SpringBootTest(classes = ShareListenerUndeserializableTest.App.class)
@DirtiesContext
class ShareListenerUndeserializableTest {
  static final Duration WAIT = Duration.ofSeconds(60);
  static final String TOPIC = "share-undeserializable";

  /** The order-no header of each call of the listener. */
  static final List<String> calls = new CopyOnWriteArrayList<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_share_undeserializable", TOPIC, TOPIC + "-dlt");
    TestShareGroups.configure(
        TOPIC, Duration.ofSeconds(5), Duration.ofSeconds(1)); // joins in a second
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;

  @Test
  void aRecordTheDeserializerRejectsIsDeadLetteredWithItsBytesAndNeverHandled() throws Exception {
    ShareListenerTests.sendOrdersAroundPoisonKeyAndValue(template, TOPIC);

    await().atMost(WAIT).until(() -> SpringTestEnvironment.effects(jdbc, TOPIC, "O-4") == 1);
    assertThat(SpringTestEnvironment.effects(jdbc, TOPIC, "O-1")).isEqualTo(1);
    assertThat(calls).as("listener calls, by order-no").containsExactlyInAnyOrder("O-1", "O-4");
    ShareListenerTests.assertPoisonKeyAndValueDeadLettered(TOPIC, WAIT);
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
    /** Keys and values read as spring-kafka advises, through ErrorHandlingDeserializer. */
    @Bean
    ShareKafkaListenerContainerFactory<String, String> shareFactory() {
      Map<String, Object> config =
          ShareListenerTests.consumerConfig(
              ErrorHandlingDeserializer.class, ErrorHandlingDeserializer.class);
      config.put(ErrorHandlingDeserializer.KEY_DESERIALIZER_CLASS, RejectingDeserializer.class);
      config.put(ErrorHandlingDeserializer.VALUE_DESERIALIZER_CLASS, RejectingDeserializer.class);
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

    /** Takes a null value in its stride, as many handlers would. */
    @Idempotent(bizType = "undeserializable", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, groupId = TOPIC, containerFactory = "shareFactory")
    public void handle(ConsumerRecord<String, String> record) {
      String orderNo = header(record, "order-no");
      calls.add(orderNo);
      SpringTestEnvironment.effect(jdbc, TOPIC, orderNo, record.value());
    }
  }
}
