package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.testing.TestDatabase;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.annotation.TopicPartition;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * Claims per poll, a listener with partitions assigned by hand ({@code topicPartitions}): the
 * container is stopped while a record's SUCCESS mark is still on its way (the database takes about
 * 3 s to write it), so the container's commit after the poll stopped before the record and its
 * offset is owed. spring-kafka unsubscribes such a consumer before closing it; the offset owed must
 * be committed once the mark is written, as a subscribed consumer's close does. Before, the
 * unsubscribe emptied the assignment and the close committed nothing: the record came again after
 * every restart (found SUCCESS, but delivered again). A real PostgreSQL and the in-JVM broker.
 */
@SpringBootTest(classes = ManualAssignmentStopCommitTest.App.class)
@DirtiesContext
class ManualAssignmentStopCommitTest {
  static final Duration WAIT = Duration.ofSeconds(60);
  static final String TOPIC = "mas-orders";
  static final Map<String, AtomicInteger> effects = new ConcurrentHashMap<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    String schema = SpringTestEnvironment.prepare(registry, "mas", TOPIC);
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement()) {
      // The SUCCESS of a key starting with "slow-" takes 3 s to write.
      statement.execute(
          "CREATE FUNCTION slow_marks() RETURNS trigger AS $$ BEGIN"
              + " IF NEW.status = 'SUCCESS' AND NEW.biz_key LIKE 'slow-%' THEN"
              + " PERFORM pg_sleep(3); END IF; RETURN NEW; END $$ LANGUAGE plpgsql");
      statement.execute(
          "CREATE TRIGGER slow_marks BEFORE UPDATE ON consumer_dedup FOR EACH ROW"
              + " EXECUTE FUNCTION slow_marks()");
    } catch (SQLException e) {
      throw new IllegalStateException(e);
    }
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void theOffsetOwedWhenTheContainerStopsIsCommitted() throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(TOPIC);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());

    send(template, TOPIC, "payload", "order-no", "slow-1");
    await().atMost(WAIT).until(() -> applied("slow-1") == 1);
    container.stop();

    assertThat(status("slow-1")).isEqualTo(DedupStatus.SUCCESS);
    assertThat(SpringTestEnvironment.committed(TOPIC, TOPIC, 0))
        .as("offset committed when the container stopped")
        .isEqualTo(1L);

    container.start();
    send(template, TOPIC, "payload", "order-no", "next-2");
    await().atMost(WAIT).until(() -> applied("next-2") == 1);
    assertThat(applied("slow-1")).isEqualTo(1);
  }

  private static int applied(String orderNo) {
    AtomicInteger count = effects.get(orderNo);
    return count == null ? 0 : count.get();
  }

  private DedupStatus status(String orderNo) {
    return store.find(DedupKey.of("mas", orderNo)).map(DedupRecord::status).orElse(null);
  }

  static class Listener {
    @Idempotent(bizType = "mas", header = "order-no")
    @KafkaListener(id = TOPIC, topicPartitions = @TopicPartition(topic = TOPIC, partitions = "0"))
    void onOrder(String payload, @Header("order-no") String orderNo) {
      effects.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listener listener() {
      return new Listener();
    }
  }
}
