package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.kafka.MissingKeyPolicy;
import io.consumerdedup.spring.listener.IdempotentRecordInterceptor;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.config.TopicBuilder;
import org.springframework.kafka.core.ConsumerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.AcknowledgingMessageListener;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.KafkaMessageListenerContainer;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.kafka.transaction.KafkaTransactionManager;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * Kafka transactions as Spring Boot sets them up ({@code transaction-id-prefix}), ack mode {@code
 * MANUAL}: an {@code @Idempotent} listener that acknowledges its record and then throws. Its
 * transaction rolls back and the record is sought back for a retry, but spring-kafka keeps the
 * acknowledged offset and commits it outside any transaction before its next poll: with the
 * container stopped (a deploy, a rebalance) before a retry succeeds, the record would never come
 * again. A real PostgreSQL and the in-JVM broker.
 */
@SpringBootTest(
    classes = KafkaTransactionManualAckTest.App.class,
    properties = {
      "spring.kafka.producer.transaction-id-prefix=dedup-manual-ack-tx-",
      "spring.kafka.listener.ack-mode=manual",
      "spring.kafka.consumer.properties.isolation.level=read_committed"
    })
@DirtiesContext
class KafkaTransactionManualAckTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final String TOPIC = "mack-orders";
  static final String HAND_BUILT = "mack-hand-built";
  static final String CALLBACK = "mack-callback";
  static final String HAND_BUILT_CALLBACK = "mack-hand-callback";
  static final String RECEIPTS = "mack-receipts";

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry,
        "spring_manual_ack_tx",
        TOPIC,
        HAND_BUILT,
        CALLBACK,
        HAND_BUILT_CALLBACK,
        RECEIPTS);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry registry;
  @Autowired ConsumerFactory<String, String> consumerFactory;
  @Autowired KafkaTransactionManager<?, ?> kafkaTransactionManager;
  @Autowired IdempotentExecutors executors;

  @Test
  void aRecordAcknowledgedBeforeItsListenerThrewIsStillDeliveredAfterTheContainerRestarts()
      throws Exception {
    MessageListenerContainer container = registry.getListenerContainer(TOPIC);
    long offset = send(TOPIC, "MA-1");

    // The first call acknowledged and threw; its retry is in the listener, which throws again
    // once the container has been asked to stop.
    stopDuringTheRetry(container, Switches.listener);

    DedupKey key = DedupKey.of("manual-ack", "MA-1");
    assertThat(store.find(key).orElseThrow().status())
        .as("the key of the record whose two calls threw")
        .isEqualTo(DedupStatus.FAILED);
    assertThat(SpringTestEnvironment.effects(jdbc, "manual-ack", "MA-1")).isZero();
    assertThat(SpringTestEnvironment.committed(TOPIC, TOPIC, 0))
        .as("the group's committed offset, its record (offset %d) never applied", offset)
        .isLessThanOrEqualTo(offset);

    Switches.listener.failing.set(false);
    container.start();
    await()
        .atMost(WAIT)
        .alias("effect of MA-1 after the restart")
        .until(() -> SpringTestEnvironment.effects(jdbc, "manual-ack", "MA-1") == 1);
    await().atMost(WAIT).until(() -> SpringTestEnvironment.committed(TOPIC, TOPIC, 0) > offset);
    assertThat(Switches.listener.calls)
        .as("two calls that threw, then the one after the restart")
        .hasValue(3);
  }

  /**
   * The same with a container built by hand and made idempotent by {@link
   * IdempotentRecordInterceptor}, whose manual acknowledgments went to the container as they came.
   */
  @Test
  void aHandBuiltContainersRecordAcknowledgedBeforeItsListenerThrewIsStillDeliveredAfterARestart()
      throws Exception {
    ContainerProperties properties = new ContainerProperties(HAND_BUILT);
    properties.setGroupId(HAND_BUILT);
    properties.setKafkaAwareTransactionManager(kafkaTransactionManager);
    properties.setAckMode(ContainerProperties.AckMode.MANUAL);
    Calls calls = Switches.handBuilt;
    properties.setMessageListener(
        (AcknowledgingMessageListener<String, String>)
            (record, ack) -> {
              String orderNo = SpringTestEnvironment.header(record, "order-no");
              calls.acknowledgeThenFailWhileFailing(orderNo, Objects.requireNonNull(ack));
              SpringTestEnvironment.effect(jdbc, HAND_BUILT, orderNo, record.value());
            });
    KafkaMessageListenerContainer<String, String> container =
        new KafkaMessageListenerContainer<>(consumerFactory, properties);
    container.setBeanName(HAND_BUILT);
    IdempotentRecordInterceptor.decorate(
        container, executors.defaultExecutor(), HAND_BUILT, "order-no", MissingKeyPolicy.FAIL);
    long offset = send(HAND_BUILT, "HB-1");
    container.start();
    try {
      stopDuringTheRetry(container, calls);

      assertThat(store.find(DedupKey.of(HAND_BUILT, "HB-1")).orElseThrow().status())
          .as("the key of the record whose two calls threw")
          .isEqualTo(DedupStatus.FAILED);
      assertThat(SpringTestEnvironment.effects(jdbc, HAND_BUILT, "HB-1")).isZero();
      assertThat(SpringTestEnvironment.committed(HAND_BUILT, HAND_BUILT, 0))
          .as("the group's committed offset, its record (offset %d) never applied", offset)
          .isLessThanOrEqualTo(offset);

      calls.failing.set(false);
      container.start();
      await()
          .atMost(WAIT)
          .alias("effect of HB-1 after the restart")
          .until(() -> SpringTestEnvironment.effects(jdbc, HAND_BUILT, "HB-1") == 1);
      await()
          .atMost(WAIT)
          .until(() -> SpringTestEnvironment.committed(HAND_BUILT, HAND_BUILT, 0) > offset);
    } finally {
      container.stop();
    }
  }

  /**
   * A listener that acknowledges in the callback of the receipt it sends, as ack mode MANUAL is
   * meant to be used; its first call also sends a record the broker refuses, so its transaction
   * fails to commit after the listener returned, the receipt's callback having acknowledged the
   * record meanwhile.
   */
  @Test
  void aRecordAcknowledgedFromTheCallbackOfASendWhoseTransactionFailedIsDeliveredAfterARestart()
      throws Exception {
    MessageListenerContainer container = registry.getListenerContainer(CALLBACK);
    long offset = send(CALLBACK, "CB-1");

    stopDuringTheRetry(container, Switches.callback);

    assertThat(store.find(DedupKey.of(CALLBACK, "CB-1")).orElseThrow().status())
        .as("the key of the record whose transaction failed, then whose retry threw")
        .isEqualTo(DedupStatus.FAILED);
    assertThat(receipts("read_uncommitted", "CB-1"))
        .as("the receipt of the transaction that failed")
        .hasSize(1);
    assertThat(receipts("read_committed", "CB-1")).isEmpty();
    assertThat(SpringTestEnvironment.committed(CALLBACK, CALLBACK, 0))
        .as("the group's committed offset, its record (offset %d) never applied", offset)
        .isLessThanOrEqualTo(offset);

    Switches.callback.failing.set(false);
    container.start();
    await()
        .atMost(WAIT)
        .alias("committed receipt of CB-1 after the restart")
        .until(() -> receipts("read_committed", "CB-1").size() == 1);
    await()
        .atMost(WAIT)
        .until(() -> SpringTestEnvironment.committed(CALLBACK, CALLBACK, 0) > offset);
  }

  /** The same through a container built by hand with {@link IdempotentRecordInterceptor}. */
  @Test
  void aHandBuiltContainersRecordAcknowledgedFromASendCallbackIsDeliveredAfterARestart()
      throws Exception {
    ContainerProperties properties = new ContainerProperties(HAND_BUILT_CALLBACK);
    properties.setGroupId(HAND_BUILT_CALLBACK);
    properties.setKafkaAwareTransactionManager(kafkaTransactionManager);
    properties.setAckMode(ContainerProperties.AckMode.MANUAL);
    properties.setMessageListener(
        (AcknowledgingMessageListener<String, String>)
            (record, ack) ->
                Listeners.receiptAcknowledgedWhenSent(
                    template, record, Objects.requireNonNull(ack), Switches.handBuiltCallback));
    KafkaMessageListenerContainer<String, String> container =
        new KafkaMessageListenerContainer<>(consumerFactory, properties);
    container.setBeanName(HAND_BUILT_CALLBACK);
    IdempotentRecordInterceptor.decorate(
        container,
        executors.defaultExecutor(),
        HAND_BUILT_CALLBACK,
        "order-no",
        MissingKeyPolicy.FAIL);
    long offset = send(HAND_BUILT_CALLBACK, "HC-1");
    container.start();
    try {
      stopDuringTheRetry(container, Switches.handBuiltCallback);

      assertThat(store.find(DedupKey.of(HAND_BUILT_CALLBACK, "HC-1")).orElseThrow().status())
          .isEqualTo(DedupStatus.FAILED);
      assertThat(receipts("read_uncommitted", "HC-1"))
          .as("the receipt of the transaction that failed")
          .hasSize(1);
      assertThat(receipts("read_committed", "HC-1")).isEmpty();
      assertThat(SpringTestEnvironment.committed(HAND_BUILT_CALLBACK, HAND_BUILT_CALLBACK, 0))
          .as("the group's committed offset, its record (offset %d) never applied", offset)
          .isLessThanOrEqualTo(offset);

      Switches.handBuiltCallback.failing.set(false);
      container.start();
      await()
          .atMost(WAIT)
          .alias("committed receipt of HC-1 after the restart")
          .until(() -> receipts("read_committed", "HC-1").size() == 1);
    } finally {
      container.stop();
    }
  }

  private static List<String> receipts(String isolation, String orderNo) {
    return SpringTestEnvironment.readWritten(RECEIPTS, isolation).stream()
        .filter(record -> orderNo.equals(record.key()))
        .map(ConsumerRecord::value)
        .toList();
  }

  /**
   * Waits for the retry of the record whose first call threw, asks the container to stop while it
   * runs, lets it throw, and waits for the container's consumer to have ended.
   */
  private static void stopDuringTheRetry(MessageListenerContainer container, Calls calls)
      throws InterruptedException {
    await().atMost(WAIT).until(calls.retryRunning::get);
    Thread stopping = new Thread(container::stop); // returns once the consumer has ended
    stopping.start();
    await().atMost(WAIT).until(() -> !container.isRunning());
    calls.release.countDown();
    stopping.join(WAIT.toMillis());
    assertThat(stopping.isAlive()).as("the stop, still waiting for the consumer").isFalse();
  }

  /** Sends a record with {@code orderNo} in a transaction of its own; returns its offset. */
  private long send(String topic, String orderNo) throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(topic, "credit 5");
    record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
    return template.executeInTransaction(t -> t.send(record)).get().getRecordMetadata().offset();
  }

  /** The calls of one listener, which acknowledges its record first, then fails while failing. */
  static final class Calls {
    final AtomicInteger calls = new AtomicInteger();
    final AtomicBoolean failing = new AtomicBoolean(true);
    final AtomicBoolean retryRunning = new AtomicBoolean();
    final CountDownLatch release = new CountDownLatch(1);

    /** The second call, the retry, waits until {@link #release} before it throws. */
    void acknowledgeThenFailWhileFailing(String orderNo, Acknowledgment ack) {
      int call = calls.incrementAndGet();
      ack.acknowledge();
      if (!failing.get()) {
        return;
      }
      if (call == 2) {
        retryRunning.set(true);
        try {
          release.await(WAIT.toSeconds(), TimeUnit.SECONDS);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
      }
      throw new IllegalStateException("downstream refused " + orderNo);
    }
  }

  static final class Switches {
    static final Calls listener = new Calls();
    static final Calls handBuilt = new Calls();
    static final Calls callback = new Calls();
    static final Calls handBuiltCallback = new Calls();
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listeners listeners(JdbcTemplate jdbc, KafkaTemplate<String, String> template) {
      return new Listeners(jdbc, template);
    }

    /** A topic whose broker refuses records over 200 bytes. */
    @Bean
    NewTopic audit() {
      return TopicBuilder.name("mack-audit")
          .partitions(1)
          .config("max.message.bytes", "200")
          .build();
    }
  }

  static class Listeners {
    final JdbcTemplate jdbc;
    final KafkaTemplate<String, String> template;

    Listeners(JdbcTemplate jdbc, KafkaTemplate<String, String> template) {
      this.jdbc = jdbc;
      this.template = template;
    }

    /** Acknowledges as soon as it has the record, then fails while failing. */
    @Idempotent(bizType = "manual-ack", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    public void on(ConsumerRecord<String, String> record, Acknowledgment ack) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      Switches.listener.acknowledgeThenFailWhileFailing(orderNo, ack);
      SpringTestEnvironment.effect(jdbc, "manual-ack", orderNo, record.value());
    }

    @Idempotent(bizType = CALLBACK, header = "order-no")
    @KafkaListener(id = CALLBACK, topics = CALLBACK)
    public void onCallback(ConsumerRecord<String, String> record, Acknowledgment ack) {
      receiptAcknowledgedWhenSent(template, record, ack, Switches.callback);
    }

    /**
     * Sends a receipt and acknowledges once it is sent; the first call also sends an audit record
     * larger than its topic accepts. The second call, the retry, waits and throws while failing.
     */
    static void receiptAcknowledgedWhenSent(
        KafkaTemplate<String, String> template,
        ConsumerRecord<String, String> record,
        Acknowledgment ack,
        Calls calls) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      int call = calls.calls.incrementAndGet();
      if (call == 2 && calls.failing.get()) {
        calls.retryRunning.set(true);
        try {
          calls.release.await(WAIT.toSeconds(), TimeUnit.SECONDS);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
        throw new IllegalStateException("downstream refused " + orderNo);
      }
      template
          .send(RECEIPTS, orderNo, "receipt for " + orderNo)
          .whenComplete(
              (sent, error) -> {
                if (error == null) {
                  ack.acknowledge();
                }
              });
      if (call == 1) {
        template.send("mack-audit", orderNo, "x".repeat(2_000));
      }
    }
  }
}
