package io.consumerdedup.spring;

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
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.springframework.beans.factory.ObjectProvider;
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
import org.springframework.kafka.listener.ContainerProperties.AckMode;
import org.springframework.kafka.listener.DefaultAfterRollbackProcessor;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.transaction.PlatformTransactionManager;
import org.springframework.transaction.support.TransactionSynchronization;
import org.springframework.transaction.support.TransactionSynchronizationManager;
import org.springframework.util.backoff.FixedBackOff;

/**
 * A container with a database transaction manager: spring-kafka runs each record's listener in a
 * transaction and commits the record's offset whatever that transaction's outcome: under ack mode
 * {@code RECORD} inside it, before the database commit; under {@code BATCH} (spring-kafka's
 * default) it queues the offset inside it and commits the queue after the poll, outside any
 * transaction; under {@code COUNT} the queue is committed only at the stop here. The database
 * refuses the commit of one record's transaction once (a deferred constraint, checked at {@code
 * COMMIT}); the container is stopped as that transaction rolls back, before spring-kafka delivers
 * the record again, as a crash or a rebalance at that moment would, and started again. The record
 * must come again and be applied once. Before, a commit passed the record: it never came again, and
 * its effect was never applied, in either mode. And a record whose transaction keeps rolling back
 * until the after-rollback processor gives it up does not hold the partition's commits back for
 * ever. A real PostgreSQL and the in-JVM broker.
 */
@SpringBootTest(classes = ContainerTransactionOffsetCommitTest.App.class)
@DirtiesContext
class ContainerTransactionOffsetCommitTest {
  static final Duration WAIT = Duration.ofSeconds(60);
  static final String RECORD_TRANSACTIONAL = "cto-record-transactional";
  static final String RECORD_SEPARATE = "cto-record-separate";
  static final String TRANSACTIONAL = "cto-batch-transactional";
  static final String SEPARATE = "cto-batch-separate";
  static final String GIVEN_UP = "cto-given-up";

  /**
   * Ack mode {@code COUNT}, never reached here: the queue is committed when the container stops.
   */
  static final String COUNTED = "cto-counted";

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    String schema =
        SpringTestEnvironment.prepare(
            registry,
            "cto",
            RECORD_TRANSACTIONAL,
            RECORD_SEPARATE,
            TRANSACTIONAL,
            SEPARATE,
            COUNTED,
            GIVEN_UP);
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement()) {
      statement.execute("CREATE TABLE bookings (listener text NOT NULL, order_no text NOT NULL)");
      statement.execute("CREATE SEQUENCE refused_commits");
      // Refuses the first transaction that books a key starting with "refused-", at its COMMIT.
      statement.execute(
          "CREATE FUNCTION refuse_first_commit() RETURNS trigger AS $$ BEGIN"
              + " IF NEW.order_no LIKE 'refused-%' AND nextval('refused_commits') = 1 THEN"
              + " RAISE EXCEPTION 'injected: the commit of % refused', NEW.order_no; END IF;"
              + " RETURN NULL; END $$ LANGUAGE plpgsql");
      statement.execute(
          "CREATE CONSTRAINT TRIGGER refuse_first_commit AFTER INSERT ON bookings"
              + " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION"
              + " refuse_first_commit()");
      // Refuses every transaction that books a key starting with "doomed-", at its COMMIT.
      statement.execute(
          "CREATE FUNCTION refuse_doomed() RETURNS trigger AS $$ BEGIN"
              + " IF NEW.order_no LIKE 'doomed-%' THEN PERFORM nextval('refused_doomed');"
              + " RAISE EXCEPTION 'injected: the commit of % refused', NEW.order_no; END IF;"
              + " RETURN NULL; END $$ LANGUAGE plpgsql");
      statement.execute("CREATE SEQUENCE refused_doomed");
      statement.execute(
          "CREATE CONSTRAINT TRIGGER refuse_doomed AFTER INSERT ON bookings"
              + " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_doomed()");
    } catch (SQLException e) {
      throw new IllegalStateException(e);
    }
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;

  @ParameterizedTest
  @ValueSource(strings = {RECORD_TRANSACTIONAL, RECORD_SEPARATE, TRANSACTIONAL, SEPARATE, COUNTED})
  void aRecordWhoseTransactionFailsToCommitComesAgainAfterARestart(String topic) throws Exception {
    jdbc.execute("ALTER SEQUENCE refused_commits RESTART");
    MessageListenerContainer container = containers.getListenerContainer(topic);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());

    send(template, topic, "book", "order-no", topic + "-1");
    send(template, topic, "book", "order-no", "refused-" + topic);
    await().atMost(WAIT).until(() -> !container.isRunning());
    assertThat(refusedCommits()).as("commits refused").isEqualTo(1);
    assertThat(bookings(topic, "refused-" + topic)).isZero();
    assertThat(SpringTestEnvironment.committed(topic, topic, 0))
        .as("offset committed when the container stopped after the refused commit")
        .isLessThanOrEqualTo(1);

    container.start();
    send(template, topic, "book", "order-no", topic + "-3");
    await().atMost(WAIT).until(() -> bookings(topic, topic + "-3") == 1);
    await()
        .atMost(WAIT)
        .until(() -> status(topic, "refused-" + topic), status -> status == DedupStatus.SUCCESS);
    assertThat(bookings(topic, "refused-" + topic))
        .as("bookings of the record whose first commit was refused")
        .isEqualTo(1);
    assertThat(bookings(topic, topic + "-1")).isEqualTo(1);
    container.stop();
    assertThat(SpringTestEnvironment.committed(topic, topic, 0))
        .as("offset committed when the container stopped again")
        .isEqualTo(3);
  }

  @Test
  void aRecordGivenUpAfterItsTransactionRolledBackDoesNotHoldTheCommitsBack() throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(GIVEN_UP);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());

    send(template, GIVEN_UP, "book", "order-no", "doomed-1");
    // Tried twice, then given up by the after-rollback processor (no commit of its own).
    await().atMost(WAIT).until(() -> sequence("refused_doomed") == 2);
    send(template, GIVEN_UP, "book", "order-no", "after-doomed");
    await().atMost(WAIT).until(() -> bookings(GIVEN_UP, "after-doomed") == 1);

    await()
        .atMost(WAIT)
        .untilAsserted(
            () ->
                assertThat(SpringTestEnvironment.committed(GIVEN_UP, GIVEN_UP, 0))
                    .as("offset committed after the record given up and the next one")
                    .isEqualTo(2));
    assertThat(bookings(GIVEN_UP, "doomed-1")).isZero();
    assertThat(sequence("refused_doomed"))
        .as("commits of the given-up record refused")
        .isEqualTo(2);
  }

  private long refusedCommits() {
    return sequence("refused_commits");
  }

  private long sequence(String name) {
    Long value =
        jdbc.queryForObject(
            "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM " + name, Long.class);
    return value == null ? 0 : value;
  }

  private int bookings(String listener, String orderNo) {
    Integer count =
        jdbc.queryForObject(
            "SELECT count(*) FROM bookings WHERE listener = ? AND order_no = ?",
            Integer.class,
            listener,
            orderNo);
    return count == null ? 0 : count;
  }

  private DedupStatus status(String bizType, String orderNo) {
    return store.find(DedupKey.of(bizType, orderNo)).map(DedupRecord::status).orElse(null);
  }

  static class Bookings {
    final JdbcTemplate jdbc;
    final ObjectProvider<KafkaListenerEndpointRegistry> containers;

    Bookings(JdbcTemplate jdbc, ObjectProvider<KafkaListenerEndpointRegistry> containers) {
      this.jdbc = jdbc;
      this.containers = containers;
    }

    @Idempotent(bizType = RECORD_TRANSACTIONAL, header = "order-no", mode = DedupMode.TRANSACTIONAL)
    @KafkaListener(
        id = RECORD_TRANSACTIONAL,
        topics = RECORD_TRANSACTIONAL,
        containerFactory = "recordTx")
    void recordInModeTransactional(String payload, @Header("order-no") String orderNo) {
      book(RECORD_TRANSACTIONAL, orderNo);
    }

    @Idempotent(bizType = RECORD_SEPARATE, header = "order-no", mode = DedupMode.SEPARATE)
    @KafkaListener(id = RECORD_SEPARATE, topics = RECORD_SEPARATE, containerFactory = "recordTx")
    void recordInModeSeparate(String payload, @Header("order-no") String orderNo) {
      book(RECORD_SEPARATE, orderNo);
    }

    @Idempotent(bizType = TRANSACTIONAL, header = "order-no", mode = DedupMode.TRANSACTIONAL)
    @KafkaListener(id = TRANSACTIONAL, topics = TRANSACTIONAL, containerFactory = "batchTx")
    void inModeTransactional(String payload, @Header("order-no") String orderNo) {
      book(TRANSACTIONAL, orderNo);
    }

    @Idempotent(bizType = SEPARATE, header = "order-no", mode = DedupMode.SEPARATE)
    @KafkaListener(id = SEPARATE, topics = SEPARATE, containerFactory = "batchTx")
    void inModeSeparate(String payload, @Header("order-no") String orderNo) {
      book(SEPARATE, orderNo);
    }

    @Idempotent(bizType = COUNTED, header = "order-no", mode = DedupMode.TRANSACTIONAL)
    @KafkaListener(id = COUNTED, topics = COUNTED, containerFactory = "countTx")
    void counted(String payload, @Header("order-no") String orderNo) {
      book(COUNTED, orderNo);
    }

    @Idempotent(bizType = GIVEN_UP, header = "order-no", mode = DedupMode.TRANSACTIONAL)
    @KafkaListener(id = GIVEN_UP, topics = GIVEN_UP, containerFactory = "batchTxGivingUp")
    void givenUp(String payload, @Header("order-no") String orderNo) {
      jdbc.update("INSERT INTO bookings (listener, order_no) VALUES (?, ?)", GIVEN_UP, orderNo);
    }

    /**
     * Books in the container's transaction; when that transaction does not commit, stops the
     * container (without waiting: this is its consumer thread) before the record can come again.
     */
    private void book(String listener, String orderNo) {
      jdbc.update("INSERT INTO bookings (listener, order_no) VALUES (?, ?)", listener, orderNo);
      TransactionSynchronizationManager.registerSynchronization(
          new TransactionSynchronization() {
            @Override
            public void afterCompletion(int status) {
              // A commit that fails is reported as of unknown outcome, not as rolled back.
              if (status != STATUS_COMMITTED) {
                containers.getObject().getListenerContainer(listener).stop(() -> {});
              }
            }
          });
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Bookings bookings(JdbcTemplate jdbc, ObjectProvider<KafkaListenerEndpointRegistry> containers) {
      return new Bookings(jdbc, containers);
    }

    /** Each record in a database transaction of the container, offsets committed after the poll. */
    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> batchTx(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory,
        PlatformTransactionManager transactionManager) {
      ConcurrentKafkaListenerContainerFactory<Object, Object> factory =
          new ConcurrentKafkaListenerContainerFactory<>();
      configurer.configure(factory, consumerFactory);
      factory.getContainerProperties().setTransactionManager(transactionManager);
      factory.getContainerProperties().setAckMode(AckMode.BATCH);
      return factory;
    }

    /** As {@link #batchTx}, each record's offset committed inside its transaction. */
    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> recordTx(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory,
        PlatformTransactionManager transactionManager) {
      ConcurrentKafkaListenerContainerFactory<Object, Object> factory =
          batchTx(configurer, consumerFactory, transactionManager);
      factory.getContainerProperties().setAckMode(AckMode.RECORD);
      return factory;
    }

    /** As {@link #batchTx}, offsets committed every 100 records, and when the container stops. */
    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> countTx(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory,
        PlatformTransactionManager transactionManager) {
      ConcurrentKafkaListenerContainerFactory<Object, Object> factory =
          batchTx(configurer, consumerFactory, transactionManager);
      factory.getContainerProperties().setAckMode(AckMode.COUNT);
      factory.getContainerProperties().setAckCount(100);
      return factory;
    }

    /** As {@link #batchTx}, a record whose transaction rolls back given up at its second try. */
    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> batchTxGivingUp(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory,
        PlatformTransactionManager transactionManager) {
      ConcurrentKafkaListenerContainerFactory<Object, Object> factory =
          batchTx(configurer, consumerFactory, transactionManager);
      factory.setAfterRollbackProcessor(
          new DefaultAfterRollbackProcessor<>(new FixedBackOff(0, 1)));
      return factory;
    }
  }
}
