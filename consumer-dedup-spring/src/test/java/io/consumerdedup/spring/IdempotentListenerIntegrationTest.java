package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.deadLetterReason;
import static io.consumerdedup.spring.SpringTestEnvironment.readTopic;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupKeyConflictException;
import io.consumerdedup.core.DedupKeyMissingException;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.micrometer.MicrometerDedupListener;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
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
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.messaging.Message;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.messaging.handler.annotation.Payload;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A Spring Boot application with {@code @Idempotent} listeners, the application's own {@code
 * DefaultErrorHandler} with a dead-letter topic, a real PostgreSQL and an in-JVM KRaft broker.
 */
@SpringBootTest(classes = IdempotentListenerIntegrationTest.App.class)
@DirtiesContext
class IdempotentListenerIntegrationTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final int RETRIES = 3;

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry,
        "spring_it",
        "it-payments",
        "it-payments-dlt",
        "it-flaky",
        "it-flaky-dlt",
        "it-poison",
        "it-poison-dlt",
        "it-orders",
        "it-orders-dlt",
        "it-payload",
        "it-payload-only",
        "it-message",
        "it-handler",
        "it-lost-ack");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;
  @Autowired MeterRegistry registry;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void sameBusinessMessageThreeTimesAtDifferentOffsetsHasOneEffect() throws Exception {
    for (int i = 0; i < 3; i++) {
      send(template, "it-payments", "charge 100", "order-no", "PAY-1");
    }
    await().atMost(WAIT).until(() -> outcomes("payment", "duplicate") == 2);
    assertThat(effects("payment", "PAY-1")).isEqualTo(1);
    DedupRecord record = store.find(DedupKey.of("payment", "PAY-1")).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(record.attempts()).isEqualTo(1);
    assertThat(record.source()).get().asString().startsWith("it-payments-0@");
    assertThat(outcomes("payment", "processed")).isEqualTo(1);
    assertThat(
            registry.find(MicrometerDedupListener.CLAIM_TIMER).tag("biz_type", "payment").timer())
        .isNotNull()
        .satisfies(timer -> assertThat(timer.count()).isEqualTo(3));
  }

  @Test
  void listenerFailingOnceThenSucceedingHasOneEffectAndTwoAttempts() throws Exception {
    send(template, "it-flaky", "ship", "order-no", "FLAKY-1");
    await().atMost(WAIT).until(() -> effects("flaky", "FLAKY-1") == 1);
    await()
        .atMost(WAIT)
        .untilAsserted(
            () -> {
              DedupRecord record = store.find(DedupKey.of("flaky", "FLAKY-1")).orElseThrow();
              assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
              assertThat(record.attempts()).isEqualTo(2);
            });
    assertThat(Switches.flakyCalls.get("FLAKY-1").get()).isEqualTo(2);
    assertThat(readTopic("it-flaky-dlt", 1, Duration.ofSeconds(2))).isEmpty();
  }

  @Test
  void poisonRecordIsFailedAfterRetriesDeadLetteredAndThePartitionMovesOn() throws Exception {
    send(template, "it-poison", "bad", "order-no", "POISON-1");
    send(template, "it-poison", "good", "order-no", "GOOD-1");

    ConsumerRecord<String, String> dead = deadLetter("it-poison-dlt", "POISON-1");
    assertThat(dead.value()).isEqualTo("bad");
    assertThat(deadLetterReason(dead)).contains("cannot process bad");
    await().atMost(WAIT).until(() -> effects("poison", "GOOD-1") == 1);

    DedupRecord poison = store.find(DedupKey.of("poison", "POISON-1")).orElseThrow();
    assertThat(poison.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(poison.attempts()).isEqualTo(RETRIES + 1);
    assertThat(poison.lastError()).get().asString().contains("cannot process bad");
    assertThat(effects("poison", "POISON-1")).isZero();
  }

  @Test
  void deadLetteredRecordReplayedLaterIsProcessedBecauseFailedAllowsRetry() throws Exception {
    send(template, "it-poison", "bad", "order-no", "REPLAY-1");
    ConsumerRecord<String, String> dead = deadLetter("it-poison-dlt", "REPLAY-1");
    assertThat(store.find(DedupKey.of("poison", "REPLAY-1")).orElseThrow().status())
        .isEqualTo(DedupStatus.FAILED);

    Switches.healed.add("REPLAY-1");
    send(template, "it-poison", dead.value(), "order-no", "REPLAY-1");
    await().atMost(WAIT).until(() -> effects("poison", "REPLAY-1") == 1);
    await()
        .atMost(WAIT)
        .until(
            () ->
                store.find(DedupKey.of("poison", "REPLAY-1")).orElseThrow().status()
                    == DedupStatus.SUCCESS);
  }

  @Test
  void missingHeaderGoesToTheDeadLetterTopicWithoutRetryAndLaterRecordsAreProcessed()
      throws Exception {
    send(template, "it-payments", "charge without key");
    send(template, "it-payments", "charge 5", "order-no", "AFTER-MISSING");

    await().atMost(WAIT).until(() -> effects("payment", "AFTER-MISSING") == 1);
    List<ConsumerRecord<String, String>> dead = readTopic("it-payments-dlt", 1, WAIT);
    assertThat(dead).extracting(ConsumerRecord::value).containsExactly("charge without key");
    assertThat(deadLetterReason(dead.get(0)))
        .contains(DedupKeyMissingException.class.getName())
        .contains("it-payments-0@");
    // One attempt only: a retry would have counted the missing key again.
    assertThat(outcomes("payment", "missing_key")).isEqualTo(1);
  }

  @Test
  void conflictingPayloadUnderOneKeyIsNotAppliedAndRoutedAsNotRetryable() throws Exception {
    send(template, "it-orders", "2 x book", "order-no", "ORD-1");
    await().atMost(WAIT).until(() -> effects("order", "ORD-1") == 1);
    send(template, "it-orders", "9 x book", "order-no", "ORD-1");

    List<ConsumerRecord<String, String>> dead = readTopic("it-orders-dlt", 1, WAIT);
    assertThat(dead).extracting(ConsumerRecord::value).containsExactly("9 x book");
    assertThat(deadLetterReason(dead.get(0))).contains(DedupKeyConflictException.class.getName());
    assertThat(outcomes("order", "conflict")).isEqualTo(1);
    assertThat(effects("order", "ORD-1")).isEqualTo(1);
    assertThat(
            jdbc.queryForObject(
                "SELECT payload FROM effects WHERE listener = 'order'", String.class))
        .isEqualTo("2 x book");
  }

  @Test
  void payloadAndHeaderArguments() throws Exception {
    sendThreeTimes("it-payload", "P-1");
    await().atMost(WAIT).until(() -> outcomes("payload-form", "duplicate") == 2);
    assertThat(effects("payload-form", "P-1")).isEqualTo(1);
  }

  @Test
  void payloadOnlyArgumentStillReadsTheHeaderFromTheRecord() throws Exception {
    sendThreeTimes("it-payload-only", "PO-1");
    await().atMost(WAIT).until(() -> outcomes("payload-only", "duplicate") == 2);
    assertThat(effects("payload-only", "PO-1")).isEqualTo(1);
  }

  @Test
  void messageArgument() throws Exception {
    sendThreeTimes("it-message", "M-1");
    await().atMost(WAIT).until(() -> outcomes("message-form", "duplicate") == 2);
    assertThat(effects("message-form", "M-1")).isEqualTo(1);
  }

  @Test
  void kafkaHandlerOfClassLevelListener() throws Exception {
    sendThreeTimes("it-handler", "H-1");
    await().atMost(WAIT).until(() -> outcomes("handler-form", "duplicate") == 2);
    assertThat(effects("handler-form", "H-1")).isEqualTo(1);
  }

  @Test
  void lostAckRedeliveryAfterRestartIsSkipped() throws Exception {
    send(template, "it-lost-ack", "credit 7", "order-no", "ACK-1");
    await().atMost(WAIT).until(() -> effects("lost-ack", "ACK-1") == 1);

    // The listener ran but never acknowledged: stopping now loses the offset commit.
    MessageListenerContainer container = containers.getListenerContainer("lost-ack");
    container.stop();
    await().atMost(WAIT).until(() -> !container.isRunning());
    container.start();

    await().atMost(WAIT).until(() -> outcomes("lost-ack", "duplicate") == 1);
    assertThat(effects("lost-ack", "ACK-1")).isEqualTo(1);
  }

  /** The dead-lettered record whose order-no is {@code orderNo}, waiting for it to arrive. */
  private ConsumerRecord<String, String> deadLetter(String topic, String orderNo) {
    long deadline = System.nanoTime() + WAIT.toNanos();
    while (System.nanoTime() < deadline) {
      for (ConsumerRecord<String, String> record : readTopic(topic, 100, Duration.ofSeconds(2))) {
        if (SpringTestEnvironment.header(record, "order-no").equals(orderNo)) {
          return record;
        }
      }
    }
    throw new AssertionError("No record with order-no " + orderNo + " reached " + topic);
  }

  private void sendThreeTimes(String topic, String key) throws Exception {
    for (int i = 0; i < 3; i++) {
      send(template, topic, key, "order-no", key);
    }
  }

  private int effects(String listener, String bizKey) {
    return SpringTestEnvironment.effects(jdbc, listener, bizKey);
  }

  private double outcomes(String bizType, String outcome) {
    return SpringTestEnvironment.outcomes(registry, bizType, outcome);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    SimpleMeterRegistry meterRegistry() {
      return new SimpleMeterRegistry();
    }

    /** The application's own error handler: consumer-dedup adds its classifications to it. */
    @Bean
    DefaultErrorHandler errorHandler(KafkaTemplate<String, String> template) {
      return SpringTestEnvironment.deadLettering(template, 50, RETRIES);
    }

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

    @Bean
    ClassLevelListener classLevelListener(JdbcTemplate jdbc) {
      return new ClassLevelListener(jdbc);
    }
  }

  /** State the test reads and changes; not a proxied bean, so fields are the real ones. */
  static final class Switches {
    static final Map<String, AtomicInteger> flakyCalls = new ConcurrentHashMap<>();

    /** Keys whose poison the listener has learnt to process (a fix deployed before a replay). */
    static final Set<String> healed = ConcurrentHashMap.newKeySet();
  }

  static class Listeners {
    final JdbcTemplate jdbc;

    Listeners(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    void effect(String listener, String bizKey, String payload) {
      SpringTestEnvironment.effect(jdbc, listener, bizKey, payload);
    }

    @Idempotent(bizType = "payment", header = "order-no")
    @KafkaListener(id = "payments", topics = "it-payments")
    public void onPayment(ConsumerRecord<String, String> record) {
      effect("payment", SpringTestEnvironment.header(record, "order-no"), record.value());
    }

    @Idempotent(bizType = "flaky", header = "order-no")
    @KafkaListener(id = "flaky", topics = "it-flaky")
    public void onFlaky(ConsumerRecord<String, String> record) {
      String key = SpringTestEnvironment.header(record, "order-no");
      if (Switches.flakyCalls.computeIfAbsent(key, k -> new AtomicInteger()).incrementAndGet()
          == 1) {
        throw new IllegalStateException("downstream timeout");
      }
      effect("flaky", key, record.value());
    }

    @Idempotent(bizType = "poison", header = "order-no")
    @KafkaListener(id = "poison", topics = "it-poison")
    public void onPoison(ConsumerRecord<String, String> record) {
      String key = SpringTestEnvironment.header(record, "order-no");
      if (record.value().equals("bad") && !Switches.healed.contains(key)) {
        throw new IllegalArgumentException("cannot process bad");
      }
      effect("poison", key, record.value());
    }

    @Idempotent(bizType = "order", header = "order-no", fingerprint = "#payload")
    @KafkaListener(id = "orders", topics = "it-orders")
    public void onOrder(@Payload String order, @Header("order-no") String orderNo) {
      effect("order", orderNo, order);
    }

    @Idempotent(bizType = "payload-form", key = "#headers['order-no']")
    @KafkaListener(id = "payload-form", topics = "it-payload")
    public void onPayload(@Payload String payload, @Header("order-no") String orderNo) {
      effect("payload-form", orderNo, payload);
    }

    @Idempotent(bizType = "payload-only", header = "order-no")
    @KafkaListener(id = "payload-only", topics = "it-payload-only")
    public void onPayloadOnly(String payload) {
      effect("payload-only", payload, payload);
    }

    @Idempotent(bizType = "message-form", key = "#payload")
    @KafkaListener(id = "message-form", topics = "it-message")
    public void onMessage(Message<String> message) {
      effect("message-form", message.getPayload(), message.getPayload());
    }

    @Idempotent(bizType = "lost-ack", header = "order-no")
    @KafkaListener(id = "lost-ack", topics = "it-lost-ack", containerFactory = "manualAckFactory")
    public void onLostAck(ConsumerRecord<String, String> record, Acknowledgment ack) {
      // Never acknowledges: the offset commit is "lost" when the container stops.
      effect("lost-ack", SpringTestEnvironment.header(record, "order-no"), record.value());
    }
  }

  @KafkaListener(id = "handler-form", topics = "it-handler")
  static class ClassLevelListener {
    final JdbcTemplate jdbc;

    ClassLevelListener(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @KafkaHandler
    @Idempotent(bizType = "handler-form", header = "order-no")
    public void on(String payload) {
      SpringTestEnvironment.effect(jdbc, "handler-form", payload, payload);
    }
  }
}
