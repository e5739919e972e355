package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.effect;
import static io.consumerdedup.spring.SpringTestEnvironment.effects;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import java.time.Duration;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.kafka.autoconfigure.ConcurrentKafkaListenerContainerFactoryConfigurer;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaHandler;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ConcurrentKafkaListenerContainerFactory;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.ConsumerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.ContainerProperties.AckMode;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.transaction.PlatformTransactionManager;

/**
 * Claims per poll, a container with a database transaction manager and ack mode {@code
 * MANUAL_IMMEDIATE}: the listener acknowledges its record inside the record's transaction, so
 * spring-kafka commits the offset in there, and consumer-dedup sends that commit once the
 * transaction has committed. The record's SUCCESS mark is started when the transaction commits too,
 * and its write is refused for a while (a transient failure). The offset must not pass the record
 * until its SUCCESS is written: a process that died meanwhile would leave the key PROCESSING with
 * its record committed, so a later copy of the key would run again once the lease ran out. Before,
 * the commit went first and passed the record. And a {@code @KafkaHandler} under ack mode {@code
 * RECORD}, which claims record by record and writes its SUCCESS as the transaction commits: a
 * SUCCESS that cannot be written then holds the record, whatever runs after it. A real PostgreSQL
 * (a trigger refuses the mark) and the in-JVM broker.
 */
@SpringBootTest(classes = ContainerTransactionImmediateAckTest.App.class)
@DirtiesContext
class ContainerTransactionImmediateAckTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final String TOPIC = "ctia-orders";
  static final String HANDLER_RECORD = "ctia-handler-record";

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    String schema = SpringTestEnvironment.prepare(registry, "ctia", TOPIC, HANDLER_RECORD);
    // The database refuses the SUCCESS of the keys listed, as a transient failure.
    SpringTestEnvironment.refuseListedSuccesses(schema);
    registry.add("consumer-dedup.store.retry-max-attempts", () -> "1");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void anAcknowledgmentInsideTheTransactionIsNotCommittedPastASuccessNotWritten() throws Exception {
    isNotCommittedPastItsSuccessUntilWritten(TOPIC);
  }

  @Test
  void aHandlerWhoseSuccessCannotBeWrittenAfterTheTransactionIsNotCommittedPast() throws Exception {
    isNotCommittedPastItsSuccessUntilWritten(HANDLER_RECORD);
  }

  private void isNotCommittedPastItsSuccessUntilWritten(String topic) throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(topic);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    String orderNo = topic + "-1";
    jdbc.update("INSERT INTO mark_faults (biz_key) VALUES (?)", orderNo);
    long refusedBefore = SpringTestEnvironment.refusedSuccesses(jdbc);

    send(template, topic, "book", "order-no", orderNo);
    await()
        .atMost(WAIT)
        .until(
            () ->
                effects(jdbc, topic, orderNo) == 1
                    && SpringTestEnvironment.refusedSuccesses(jdbc) > refusedBefore);
    // The commit is sent as the transaction ends; give a late one the time to land.
    Thread.sleep(500);
    assertThat(status(topic, orderNo))
        .as("the key, its SUCCESS refused")
        .isEqualTo(DedupStatus.PROCESSING);
    assertThat(SpringTestEnvironment.committed(topic, topic, 0))
        .as("offset committed while the record's SUCCESS is not written")
        .isLessThan(1);

    jdbc.update("DELETE FROM mark_faults WHERE biz_key = ?", orderNo);
    await().atMost(WAIT).until(() -> status(topic, orderNo) == DedupStatus.SUCCESS);
    await().atMost(WAIT).until(() -> SpringTestEnvironment.committed(topic, topic, 0) == 1);
    assertThat(effects(jdbc, topic, orderNo)).isEqualTo(1);
  }

  private DedupStatus status(String bizType, String orderNo) {
    return store.find(DedupKey.of(bizType, orderNo)).map(DedupRecord::status).orElse(null);
  }

  static class Listener {
    final JdbcTemplate jdbc;

    Listener(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = TOPIC, header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, containerFactory = "immediateTx")
    void onOrder(String payload, @Header("order-no") String orderNo, Acknowledgment ack) {
      effect(jdbc, TOPIC, orderNo, payload);
      ack.acknowledge();
    }
  }

  /** Claims record by record: a {@code @KafkaHandler} does not claim with its poll. */
  @KafkaListener(id = HANDLER_RECORD, topics = HANDLER_RECORD, containerFactory = "recordTx")
  static class RecordHandler {
    final JdbcTemplate jdbc;

    RecordHandler(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @KafkaHandler
    @Idempotent(bizType = HANDLER_RECORD, header = "order-no")
    public void on(String payload, @Header("order-no") String orderNo) {
      effect(jdbc, HANDLER_RECORD, orderNo, payload);
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listener listener(JdbcTemplate jdbc) {
      return new Listener(jdbc);
    }

    @Bean
    RecordHandler recordHandler(JdbcTemplate jdbc) {
      return new RecordHandler(jdbc);
    }

    /** Each record in a database transaction of the container; acknowledged offsets at once. */
    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> immediateTx(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory,
        PlatformTransactionManager transactionManager) {
      ConcurrentKafkaListenerContainerFactory<Object, Object> factory =
          new ConcurrentKafkaListenerContainerFactory<>();
      configurer.configure(factory, consumerFactory);
      factory.getContainerProperties().setTransactionManager(transactionManager);
      factory.getContainerProperties().setAckMode(AckMode.MANUAL_IMMEDIATE);
      return factory;
    }

    /** As {@link #immediateTx}, each record's offset committed as the container is done with it. */
    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> recordTx(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory,
        PlatformTransactionManager transactionManager) {
      ConcurrentKafkaListenerContainerFactory<Object, Object> factory =
          immediateTx(configurer, consumerFactory, transactionManager);
      factory.getContainerProperties().setAckMode(AckMode.RECORD);
      return factory;
    }
  }
}
