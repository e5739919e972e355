package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.kafka.MissingKeyPolicy;
import io.consumerdedup.spring.listener.IdempotentRecordInterceptor;
import io.consumerdedup.testing.InnoDbDeadlocks;
import io.consumerdedup.testing.TestKafka;
import io.consumerdedup.testing.TestMariaDb;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.kafka.autoconfigure.ConcurrentKafkaListenerContainerFactoryConfigurer;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.jdbc.datasource.DataSourceUtils;
import org.springframework.jdbc.datasource.TransactionAwareDataSourceProxy;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ConcurrentKafkaListenerContainerFactory;
import org.springframework.kafka.core.ConsumerFactory;
import org.springframework.kafka.core.DefaultKafkaConsumerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.KafkaMessageListenerContainer;
import org.springframework.kafka.listener.MessageListener;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.transaction.PlatformTransactionManager;
import org.springframework.transaction.annotation.Transactional;

/**
 * Mode TRANSACTIONAL on MariaDB, a listener that catches a deadlock and carries on. InnoDB rolls
 * the whole transaction back at a deadlock (1213), the claim's dedup row with it, and the
 * listener's next statement opens a new transaction on the same connection, which Spring then
 * commits: the record must be retried, not passed as applied with no dedup row.
 */
@SpringBootTest(
    classes = MariaDbCaughtDeadlockListenerTest.App.class,
    properties = "consumer-dedup.mode=transactional")
@DirtiesContext
class MariaDbCaughtDeadlockListenerTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final Map<String, AtomicInteger> calls = new ConcurrentHashMap<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) throws SQLException {
    TestKafka.createTopics(
        1, "deadlock-method", "deadlock-checked", "deadlock-container", "deadlock-interceptor");
    String database = TestMariaDb.newDatabase("spring_deadlock");
    try (Connection connection = TestMariaDb.connect(database, TestMariaDb.Driver.MARIADB);
        Statement statement = connection.createStatement()) {
      InnoDbDeadlocks.createTables(connection);
      statement.execute("CREATE TABLE ledger (listener VARCHAR(32), biz_key VARCHAR(64))");
    }
    registry.add(
        "spring.datasource.url", () -> TestMariaDb.url(database, TestMariaDb.Driver.MARIADB));
    SpringTestEnvironment.prepareKafka(registry);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;
  @Autowired DataSource dataSource;
  @Autowired Listeners listeners;

  @Test
  void aTransactionalListenerThatCatchesADeadlockIsRetriedAndAppliedOnce() throws Exception {
    appliedOnceThoughItsFirstAttemptCaughtADeadlock("deadlock-method", "method");
  }

  /**
   * {@code @Transactional} commits on a checked exception: the claim must still be checked before
   * that commit, or the writes after the deadlock commit alone, with no dedup row, and the retry
   * applies them again.
   */
  @Test
  void aTransactionalListenerThatCatchesADeadlockThenThrowsACheckedExceptionIsAppliedOnce()
      throws Exception {
    appliedOnceThoughItsFirstAttemptCaughtADeadlock("deadlock-checked", "checked");
  }

  @Test
  void aListenerInTheContainersTransactionThatCatchesADeadlockIsRetriedAndAppliedOnce()
      throws Exception {
    appliedOnceThoughItsFirstAttemptCaughtADeadlock("deadlock-container", "container");
  }

  @Test
  void aHandBuiltContainersListenerThatCatchesADeadlockIsRetriedAndAppliedOnce() throws Exception {
    ContainerProperties properties = new ContainerProperties("deadlock-interceptor");
    properties.setGroupId("deadlock-interceptor");
    properties.setTransactionManager(new DataSourceTransactionManager(dataSource));
    properties.setMessageListener(
        (MessageListener<String, String>) record -> listeners.apply("interceptor", record));
    KafkaMessageListenerContainer<String, String> container =
        new KafkaMessageListenerContainer<>(
            new DefaultKafkaConsumerFactory<>(
                Map.of(
                    ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG,
                    TestKafka.bootstrapServers(),
                    ConsumerConfig.AUTO_OFFSET_RESET_CONFIG,
                    "earliest"),
                new StringDeserializer(),
                new StringDeserializer()),
            properties);
    try (IdempotentExecutor executor =
        IdempotentExecutor.builder(
                JdbcDedupStore.builder(new TransactionAwareDataSourceProxy(dataSource)).build())
            .mode(DedupMode.TRANSACTIONAL)
            .build()) {
      IdempotentRecordInterceptor.decorate(
          container, executor, "interceptor", "order-no", MissingKeyPolicy.FAIL);
      container.start();
      try {
        appliedOnceThoughItsFirstAttemptCaughtADeadlock("deadlock-interceptor", "interceptor");
      } finally {
        container.stop();
      }
    }
  }

  private void appliedOnceThoughItsFirstAttemptCaughtADeadlock(String topic, String bizType)
      throws Exception {
    String key = "DL-" + bizType;
    send(template, topic, "debit 7", "order-no", key);
    send(template, topic, "debit 1", "order-no", "next-" + bizType);
    // The one partition's next record applied: the first one is done with.
    await().atMost(WAIT).until(() -> ledger(bizType, "next-" + bizType) == 1);
    DedupRecord afterFirst = store.find(DedupKey.of(bizType, key)).orElse(null);

    send(template, topic, "debit 7", "order-no", key); // the same record again
    send(template, topic, "debit 1", "order-no", "last-" + bizType);
    await().atMost(WAIT).until(() -> ledger(bizType, "last-" + bizType) == 1);

    assertThat(ledger(bizType, key))
        .as(
            "ledger rows of %s, after its first delivery (its dedup row then: %s) and a copy",
            key, afterFirst)
        .isEqualTo(1);
    assertThat(afterFirst).as("the dedup row of %s once it was passed", key).isNotNull();
    assertThat(store.find(DedupKey.of(bizType, key)).orElseThrow().status())
        .isEqualTo(DedupStatus.SUCCESS);
    assertThat(calls.get(key)).as("calls: the deadlocked attempt, then its retry").hasValue(2);
  }

  private int ledger(String listener, String bizKey) {
    Integer count =
        jdbc.queryForObject(
            "SELECT count(*) FROM ledger WHERE listener = ? AND biz_key = ?",
            Integer.class,
            listener,
            bizKey);
    return count == null ? 0 : count;
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> transactedFactory(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory,
        PlatformTransactionManager transactionManager) {
      ConcurrentKafkaListenerContainerFactory<Object, Object> factory =
          new ConcurrentKafkaListenerContainerFactory<>();
      configurer.configure(factory, consumerFactory);
      factory.getContainerProperties().setTransactionManager(transactionManager);
      return factory;
    }

    @Bean
    Listeners listeners(JdbcTemplate jdbc, DataSource dataSource) {
      return new Listeners(jdbc, dataSource);
    }
  }

  static class Listeners {
    final JdbcTemplate jdbc;
    final DataSource dataSource;

    Listeners(JdbcTemplate jdbc, DataSource dataSource) {
      this.jdbc = jdbc;
      this.dataSource = dataSource;
    }

    @Transactional
    @Idempotent(bizType = "method", header = "order-no")
    @KafkaListener(id = "deadlock-method", topics = "deadlock-method")
    public void inItsOwnTransaction(ConsumerRecord<String, String> record) throws Exception {
      apply("method", record);
    }

    /** Catches the deadlock, writes, then fails its first call with a checked exception. */
    @Transactional
    @Idempotent(bizType = "checked", header = "order-no")
    @KafkaListener(id = "deadlock-checked", topics = "deadlock-checked")
    public void throwingACheckedException(ConsumerRecord<String, String> record) throws Exception {
      apply("checked", record);
      String key = SpringTestEnvironment.header(record, "order-no");
      if (key.startsWith("DL-") && calls.get(key).get() == 1) {
        throw new java.io.IOException("the first call of " + key + " fails after its write");
      }
    }

    @Idempotent(bizType = "container", header = "order-no")
    @KafkaListener(
        id = "deadlock-container",
        topics = "deadlock-container",
        containerFactory = "transactedFactory")
    public void inTheContainersTransaction(ConsumerRecord<String, String> record) throws Exception {
      apply("container", record);
    }

    /**
     * The first call of a {@code DL-} key is a deadlock's victim, catches it as a statement it may
     * do without, and writes its ledger row all the same.
     */
    void apply(String listener, ConsumerRecord<String, String> record) {
      String key = SpringTestEnvironment.header(record, "order-no");
      int call = calls.computeIfAbsent(key, k -> new AtomicInteger()).incrementAndGet();
      if (call == 1 && key.startsWith("DL-")) {
        try {
          InnoDbDeadlocks.deadlock(DataSourceUtils.getConnection(dataSource), dataSource);
        } catch (SQLException deadlock) {
          // the account update is optional
        } catch (Exception e) {
          throw new IllegalStateException(e);
        }
      }
      jdbc.update("INSERT INTO ledger (listener, biz_key) VALUES (?, ?)", listener, key);
    }
  }
}
