package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import java.time.Duration;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * An {@code @Idempotent} record listener whose consumer commits by itself ({@code
 * enable.auto.commit=true}: spring-kafka then commits nothing, and the Kafka client commits the
 * consumer's positions from within its polls): the database refuses one record's SUCCESS, and no
 * offset passes that record until the SUCCESS is written; then everything is applied once and
 * committed. A real PostgreSQL and the in-JVM broker.
 */
@SpringBootTest(classes = RecordListenerAutoCommitTest.App.class)
@DirtiesContext
class RecordListenerAutoCommitTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final String TOPIC = "ac-auto";
  static String schema;

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    schema = SpringTestEnvironment.prepare(registry, "auto_commit", TOPIC);
    SpringTestEnvironment.refuseListedSuccesses(schema);
    registry.add("consumer-dedup.store.retry-max-attempts", () -> "1");
    registry.add("consumer-dedup.hold.initial-backoff", () -> "200ms");
    registry.add("consumer-dedup.hold.max-backoff", () -> "1s");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void noOffsetPassesARecordWhoseSuccessTheDatabaseRefuses() throws Exception {
    SpringTestEnvironment.refuseSuccessOf(jdbc, "AC-3");
    MessageListenerContainer container = containers.getListenerContainer(TOPIC);
    container.pause();
    await().atMost(WAIT).until(container::isContainerPaused);
    try {
      for (int i = 0; i < 10; i++) {
        SpringTestEnvironment.send(template, TOPIC, "payload of AC-" + i, "order-no", "AC-" + i);
      }
      container.resume(); // one poll: the records after the refused one are in hand
      await().atMost(WAIT).until(() -> effects("AC-3") == 1);
      await().atMost(WAIT).until(() -> SpringTestEnvironment.refusedSuccessesOf(jdbc, "AC-3") > 0);
      // The client commits its positions every 100 ms: never past the refused record (offset 3).
      long highest = 0;
      long end = System.nanoTime() + Duration.ofSeconds(3).toNanos();
      while (System.nanoTime() < end) {
        highest = Math.max(highest, SpringTestEnvironment.committed(TOPIC, TOPIC, 0));
        Thread.sleep(100);
      }
      assertThat(highest).as("committed while the SUCCESS of offset 3 is refused").isLessThan(4);
      assertThat(status("AC-3")).isEqualTo(DedupStatus.PROCESSING);
    } finally {
      jdbc.update("DELETE FROM mark_faults");
    }
    await().atMost(WAIT).until(() -> SpringTestEnvironment.committed(TOPIC, TOPIC, 0) == 10);
    for (int i = 0; i < 10; i++) {
      assertThat(effects("AC-" + i)).as("AC-" + i).isEqualTo(1);
      assertThat(status("AC-" + i)).as("AC-" + i).isEqualTo(DedupStatus.SUCCESS);
    }
  }

  private int effects(String bizKey) {
    return SpringTestEnvironment.effects(jdbc, "auto", bizKey);
  }

  private DedupStatus status(String bizKey) {
    return store.find(DedupKey.of("auto", bizKey)).map(DedupRecord::status).orElse(null);
  }

  static class Listener {
    private final JdbcTemplate jdbc;

    Listener(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = "auto", header = "order-no")
    @KafkaListener(
        id = TOPIC,
        topics = TOPIC,
        properties = {"enable.auto.commit=true", "auto.commit.interval.ms=100"})
    void listen(String payload, @Header("order-no") String orderNo) {
      SpringTestEnvironment.effect(jdbc, "auto", orderNo, null);
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean(destroyMethod = "close")
    StatementCounter dataSource(@Value("${spring.datasource.url}") String url) {
      return StatementCounter.pool(url);
    }

    @Bean
    Listener listener(JdbcTemplate jdbc) {
      return new Listener(jdbc);
    }
  }
}
