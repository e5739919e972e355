package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import java.time.Duration;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.transaction.annotation.Transactional;

/**
 * A {@code @Transactional} listener in the default mode SEPARATE, with one pool connection and one
 * consumer thread: the claim commits before the listener's transaction takes the connection, and
 * SUCCESS is written after it gave the connection back, so no call waits for a second connection.
 */
@SpringBootTest(
    classes = TransactionalListenerOnePoolConnectionTest.App.class,
    properties = {
      "spring.datasource.hikari.maximum-pool-size=1",
      "spring.datasource.hikari.connection-timeout=2000"
    })
@DirtiesContext
class TransactionalListenerOnePoolConnectionTest {

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_one_conn", "one-connection");
    // prepare() sets a larger pool; this test needs exactly one connection.
    registry.add("spring.datasource.hikari.maximum-pool-size", () -> "1");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;

  @Test
  void eachRecordIsAppliedOnceWithoutWaitingForASecondConnection() throws Exception {
    for (String orderNo : new String[] {"ONE-1", "ONE-2", "ONE-1", "ONE-3"}) {
      SpringTestEnvironment.send(template, "one-connection", "charge", "order-no", orderNo);
    }

    await()
        .atMost(Duration.ofSeconds(20))
        .until(() -> SpringTestEnvironment.effects(jdbc, "one-connection", "ONE-3") == 1);
    for (String orderNo : new String[] {"ONE-1", "ONE-2", "ONE-3"}) {
      assertThat(SpringTestEnvironment.effects(jdbc, "one-connection", orderNo))
          .as(orderNo)
          .isEqualTo(1);
      assertThat(store.find(DedupKey.of("booking", orderNo)).orElseThrow().status())
          .isEqualTo(DedupStatus.SUCCESS);
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Bookings bookings(JdbcTemplate jdbc) {
      return new Bookings(jdbc);
    }
  }

  static class Bookings {
    final JdbcTemplate jdbc;

    Bookings(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Transactional
    @Idempotent(bizType = "booking", header = "order-no")
    @KafkaListener(id = "one-connection", topics = "one-connection")
    public void book(ConsumerRecord<String, String> record) {
      SpringTestEnvironment.effect(
          jdbc, "one-connection", SpringTestEnvironment.header(record, "order-no"), record.value());
    }
  }
}
