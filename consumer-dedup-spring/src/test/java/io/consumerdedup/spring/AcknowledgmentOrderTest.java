package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.effect;
import static io.consumerdedup.spring.SpringTestEnvironment.effects;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.testing.TestDatabase;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.kafka.autoconfigure.ConcurrentKafkaListenerContainerFactoryConfigurer;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ConcurrentKafkaListenerContainerFactory;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.ConsumerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.CommonContainerStoppingErrorHandler;
import org.springframework.kafka.listener.ContainerProperties.AckMode;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.transaction.annotation.Transactional;

/**
 * When the listener's {@code Acknowledgment} reaches the container. Mode TRANSACTIONAL under ack
 * mode {@code MANUAL_IMMEDIATE}, claims per poll off: the listener acknowledges inside its database
 * transaction, which then fails to commit (a deferred constraint); the container stops on the
 * failure, as a process dying there would, and starts again: the record must be delivered again and
 * applied once, not skipped past an offset committed before its transaction. And an asynchronous
 * listener whose {@code nack} spring-kafka refuses (off the consumer thread), which catches the
 * refusal and acknowledges: its key must be SUCCESS, so a later copy is a duplicate. A real
 * PostgreSQL and the in-JVM broker.
 */
@SpringBootTest(
    classes = AcknowledgmentOrderTest.App.class,
    // Without the consumer that also leaves a commit made inside a transaction to its end.
    properties = "consumer-dedup.claims-per-poll=false")
@DirtiesContext
class AcknowledgmentOrderTest {
  static final Duration WAIT = Duration.ofSeconds(20);
  static final String COMMIT = "ao-commit";
  static final String NACK = "ao-nack";
  static final Map<String, AtomicInteger> calls = new ConcurrentHashMap<>();
  static final List<String> refusals = new CopyOnWriteArrayList<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    String schema = SpringTestEnvironment.prepare(registry, "ackorder", COMMIT, NACK);
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement()) {
      statement.execute(
          "CREATE TABLE deferred_checks (id int, UNIQUE (id) DEFERRABLE INITIALLY DEFERRED)");
    } catch (SQLException e) {
      throw new IllegalStateException(e);
    }
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void anAcknowledgmentIsNotCommittedBeforeTheTransactionThatFailsToCommit() throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(COMMIT);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    send(template, COMMIT, "book", "order-no", "C-1");

    await().atMost(WAIT).until(() -> !container.isRunning());
    assertThat(calls.get(COMMIT)).as("deliveries before the stop").hasValue(1);
    assertThat(jdbc.queryForObject("SELECT count(*) FROM deferred_checks", Integer.class))
        .as("rows of the transaction that failed to commit")
        .isZero();
    assertThat(SpringTestEnvironment.committed(COMMIT, COMMIT, 0))
        .as("offset committed past a record whose transaction did not commit")
        .isLessThan(1);

    container.start();
    await().atMost(WAIT).until(() -> status(COMMIT, "C-1") == DedupStatus.SUCCESS);
    await().atMost(WAIT).until(() -> SpringTestEnvironment.committed(COMMIT, COMMIT, 0) == 1);
    assertThat(calls.get(COMMIT)).as("deliveries").hasValue(2);
    assertThat(effects(jdbc, COMMIT, "C-1")).as("C-1 applied").isEqualTo(1);
  }

  @Test
  void aNackTheContainerRefusesLeavesTheAppliedKeySucceeded() throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(NACK);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    send(template, NACK, "book", "order-no", "N-1");
    await().atMost(WAIT).until(() -> SpringTestEnvironment.committed(NACK, NACK, 0) == 1);
    assertThat(refusals)
        .as("the nack refused")
        .singleElement()
        .asString()
        .contains("consumer thread");
    assertThat(status(NACK, "N-1")).as("the applied key").isEqualTo(DedupStatus.SUCCESS);

    send(template, NACK, "book again", "order-no", "N-1");
    await().atMost(WAIT).until(() -> SpringTestEnvironment.committed(NACK, NACK, 0) == 2);
    assertThat(effects(jdbc, NACK, "N-1")).as("N-1 applied").isEqualTo(1);
  }

  private DedupStatus status(String bizType, String orderNo) {
    return store.find(DedupKey.of(bizType, orderNo)).map(DedupRecord::status).orElse(null);
  }

  static class Listeners {
    final JdbcTemplate jdbc;

    Listeners(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    /** The first delivery's transaction violates a constraint checked only as it commits. */
    @Idempotent(bizType = COMMIT, header = "order-no", mode = DedupMode.TRANSACTIONAL)
    @Transactional
    @KafkaListener(id = COMMIT, topics = COMMIT, containerFactory = "immediateStopping")
    public void onCommit(String payload, @Header("order-no") String orderNo, Acknowledgment ack) {
      effect(jdbc, COMMIT, orderNo, payload);
      if (calls.computeIfAbsent(COMMIT, k -> new AtomicInteger()).incrementAndGet() == 1) {
        jdbc.update("INSERT INTO deferred_checks (id) VALUES (1), (1)");
      }
      ack.acknowledge();
    }

    /** Work done off the consumer thread, which tries a nack and settles for an acknowledgment. */
    @Idempotent(bizType = NACK, header = "order-no")
    @KafkaListener(id = NACK, topics = NACK, containerFactory = "manual")
    public CompletableFuture<Void> onNack(
        String payload, @Header("order-no") String orderNo, Acknowledgment ack) {
      return CompletableFuture.runAsync(
          () -> {
            effect(jdbc, NACK, orderNo, payload);
            if (calls.computeIfAbsent(NACK, k -> new AtomicInteger()).incrementAndGet() == 1) {
              try {
                ack.nack(Duration.ofMillis(100));
              } catch (IllegalStateException refused) {
                refusals.add(String.valueOf(refused.getMessage()));
              }
            }
            ack.acknowledge();
          });
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listeners listeners(JdbcTemplate jdbc) {
      return new Listeners(jdbc);
    }

    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> manual(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory) {
      ConcurrentKafkaListenerContainerFactory<Object, Object> factory =
          new ConcurrentKafkaListenerContainerFactory<>();
      configurer.configure(factory, consumerFactory);
      factory.getContainerProperties().setAckMode(AckMode.MANUAL);
      return factory;
    }

    /** Acknowledged offsets committed at once; a failure stops the container. */
    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> immediateStopping(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory) {
      ConcurrentKafkaListenerContainerFactory<Object, Object> factory =
          new ConcurrentKafkaListenerContainerFactory<>();
      configurer.configure(factory, consumerFactory);
      factory.getContainerProperties().setAckMode(AckMode.MANUAL_IMMEDIATE);
      factory.setCommonErrorHandler(new CommonContainerStoppingErrorHandler());
      return factory;
    }
  }
}
