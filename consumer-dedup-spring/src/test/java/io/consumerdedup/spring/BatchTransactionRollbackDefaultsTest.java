package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.ConsumerRecord;
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
import org.springframework.kafka.listener.BatchListenerFailedException;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.kafka.test.utils.ContainerTestUtils;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.transaction.annotation.Transactional;
import org.springframework.transaction.interceptor.TransactionAspectSupport;

/**
 * The {@code @Transactional} batch listeners of {@link BatchListenerIntegrationTest} that fail at
 * one record (by {@code BatchListenerFailedException}, or by a nack inside a transaction marked
 * rollback-only), here under the library's own error handling: the application declares no error
 * handler. The rollback undoes the records before the failing one as well; each record of the batch
 * must still be applied once, none lost.
 */
@SpringBootTest(classes = BatchTransactionRollbackDefaultsTest.App.class)
@DirtiesContext
class BatchTransactionRollbackDefaultsTest {
  static final Duration WAIT = Duration.ofSeconds(60);

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry, "spring_batch_tx_defaults", "btd-tx-fail", "btd-tx-nack");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void recordsBeforeTheFailedOneOfATransactionThatRollsBackAreAppliedWithTheDefaults()
      throws Exception {
    inOneBatch("btd-tx-fail", "TF-1", "TF-2", "TF-3");

    await().atMost(WAIT).until(() -> committed("btd-tx-fail") == 3);
    assertThat(Listeners.failed).as("the listener failed at TF-3").isTrue();
    assertThat(Listeners.batches.get("btd-tx-fail").get(0))
        .as("the batch whose transaction rolled back")
        .containsExactly("TF-1", "TF-2", "TF-3");
    for (String key : List.of("TF-1", "TF-2", "TF-3")) {
      assertThat(effects("txfail", key))
          .as("%s applied (the method was given %s)", key, Listeners.batches.get("btd-tx-fail"))
          .isEqualTo(1);
      assertThat(status("txfail", key)).as(key).isEqualTo(DedupStatus.SUCCESS);
    }
  }

  @Test
  void recordsBeforeTheNackedOneOfATransactionThatRollsBackAreAppliedWithTheDefaults()
      throws Exception {
    inOneBatch("btd-tx-nack", "TN-1", "TN-2", "TN-3");

    await().atMost(WAIT).until(() -> committed("btd-tx-nack") == 3);
    assertThat(Listeners.nacked).as("the listener nacked TN-3").isTrue();
    assertThat(Listeners.batches.get("btd-tx-nack").get(0))
        .as("the batch whose transaction rolled back")
        .containsExactly("TN-1", "TN-2", "TN-3");
    for (String key : List.of("TN-1", "TN-2", "TN-3")) {
      assertThat(effects("txnack", key))
          .as("%s applied (the method was given %s)", key, Listeners.batches.get("btd-tx-nack"))
          .isEqualTo(1);
      assertThat(status("txnack", key)).as(key).isEqualTo(DedupStatus.SUCCESS);
    }
  }

  /**
   * Sends the keys while the listener is stopped, so that its next consumer fetches them together.
   */
  private void inOneBatch(String topic, String... keys) throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(topic);
    ContainerTestUtils.waitForAssignment(container, 1);
    container.stop();
    for (int i = 0; i < keys.length; i++) {
      send(template, topic, i == keys.length - 1 ? "fails once" : "ok", "order-no", keys[i]);
    }
    container.start();
  }

  private long committed(String topic) throws Exception {
    return SpringTestEnvironment.committed(topic, topic, 0);
  }

  private int effects(String listener, String bizKey) {
    return SpringTestEnvironment.effects(jdbc, listener, bizKey);
  }

  private DedupStatus status(String bizType, String key) {
    return store.find(DedupKey.of(bizType, key)).orElseThrow().status();
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> manualAckFactory(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory) {
      ConcurrentKafkaListenerContainerFactory<Object, Object> factory =
          new ConcurrentKafkaListenerContainerFactory<>();
      configurer.configure(factory, consumerFactory);
      factory.getContainerProperties().setAckMode(ContainerProperties.AckMode.MANUAL);
      return factory;
    }

    @Bean
    Listeners listeners(JdbcTemplate jdbc) {
      return new Listeners(jdbc);
    }
  }

  static class Listeners {
    static final Map<String, List<List<String>>> batches = new ConcurrentHashMap<>();
    static final AtomicBoolean failed = new AtomicBoolean();
    static final AtomicBoolean nacked = new AtomicBoolean();

    final JdbcTemplate jdbc;

    Listeners(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    private static void seen(String topic, List<ConsumerRecord<String, String>> records) {
      batches
          .computeIfAbsent(topic, t -> new CopyOnWriteArrayList<>())
          .add(records.stream().map(record -> header(record, "order-no")).toList());
    }

    @Transactional
    @Idempotent(bizType = "txfail", header = "order-no")
    @KafkaListener(id = "btd-tx-fail", topics = "btd-tx-fail", batch = "true")
    public void onTransactionalFail(List<ConsumerRecord<String, String>> records) {
      seen("btd-tx-fail", records);
      for (int i = 0; i < records.size(); i++) {
        ConsumerRecord<String, String> record = records.get(i);
        SpringTestEnvironment.effect(jdbc, "txfail", header(record, "order-no"), record.value());
        if (record.value().equals("fails once") && failed.compareAndSet(false, true)) {
          throw new BatchListenerFailedException(
              "downstream timeout", new IllegalStateException("downstream timeout"), i);
        }
      }
    }

    @Transactional
    @Idempotent(bizType = "txnack", header = "order-no")
    @KafkaListener(
        id = "btd-tx-nack",
        topics = "btd-tx-nack",
        batch = "true",
        containerFactory = "manualAckFactory")
    public void onTransactionalNack(
        List<ConsumerRecord<String, String>> records, Acknowledgment ack) {
      seen("btd-tx-nack", records);
      for (int i = 0; i < records.size(); i++) {
        ConsumerRecord<String, String> record = records.get(i);
        SpringTestEnvironment.effect(jdbc, "txnack", header(record, "order-no"), record.value());
        if (record.value().equals("fails once") && nacked.compareAndSet(false, true)) {
          TransactionAspectSupport.currentTransactionStatus().setRollbackOnly();
          ack.nack(i, Duration.ofMillis(100));
          return;
        }
      }
      ack.acknowledge();
    }
  }
}
