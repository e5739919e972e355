package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.kafka.autoconfigure.ConcurrentKafkaListenerContainerFactoryConfigurer;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.BackOff;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.annotation.RetryableTopic;
import org.springframework.kafka.config.ConcurrentKafkaListenerContainerFactory;
import org.springframework.kafka.core.ConsumerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.RecordInterceptor;
import org.springframework.kafka.listener.adapter.ConsumerRecordMetadata;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import reactor.core.publisher.Mono;

/**
 * The listener shapes spring-kafka users write every day, each with {@code @Idempotent} in a Spring
 * Boot application on a real broker and PostgreSQL, and what a user would count: effects applied,
 * committed offsets, keys' status. (The shapes that cannot be protected are refused at start-up:
 * {@code ListenerShapeRefusalTest}.)
 */
@SpringBootTest(classes = ListenerShapesIntegrationTest.App.class)
@DirtiesContext
class ListenerShapesIntegrationTest {
  static final Duration WAIT = Duration.ofSeconds(30);

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry,
        "spring_shapes",
        "shape-future",
        "shape-mono",
        "shape-nack",
        "shape-manual",
        "shape-meta",
        "shape-interface",
        "shape-int",
        "shape-retryable");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;

  @Test
  void aFutureThatFailsIsRetriedAndItsDuplicateIsAcknowledged() throws Exception {
    assertFailsOnceThenAppliedOnceAndTheDuplicateIsCommitted("shape-future", "future");
  }

  @Test
  void aMonoThatFailsIsRetriedAndItsDuplicateIsAcknowledged() throws Exception {
    assertFailsOnceThenAppliedOnceAndTheDuplicateIsCommitted("shape-mono", "mono");
  }

  @Test
  void aNackedRecordIsRetriedNotSkippedAsADuplicate() throws Exception {
    assertFailsOnceThenAppliedOnceAndTheDuplicateIsCommitted("shape-nack", "nack");
  }

  private void assertFailsOnceThenAppliedOnceAndTheDuplicateIsCommitted(
      String topic, String bizType) throws Exception {
    send(topic, "charge 10", "K-1");
    send(topic, "charge 10 again", "K-1");

    await().atMost(WAIT).until(() -> committed(topic) == 2);
    assertThat(effects(topic, "K-1")).as("effects").isEqualTo(1);
    assertThat(Switches.calls.get(topic + "/K-1")).as("listener calls").hasValue(2);
    DedupRecord record = store.find(DedupKey.of(bizType, "K-1")).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(record.attempts()).as("the failed attempt, then the retry").isEqualTo(2);
  }

  @Test
  void inManualAckModeADuplicateIsAcknowledgedSoTheLagReachesZero() throws Exception {
    send("shape-manual", "charge 3", "M-1");
    send("shape-manual", "charge 3 again", "M-1");

    await().atMost(WAIT).until(() -> committed("shape-manual") == 2);
    assertThat(effects("shape-manual", "M-1")).isEqualTo(1);
  }

  @Test
  void theMetadataParameterIsNotTakenForThePayload() throws Exception {
    send("shape-meta", "ORDER-M1", "ignored");
    send("shape-meta", "ORDER-M1", "ignored");
    send("shape-meta", "ORDER-M2", "ignored");

    await().atMost(WAIT).until(() -> committed("shape-meta") == 3);
    assertThat(store.find(DedupKey.of("meta", "ORDER-M1"))).isPresent();
    assertThat(effectsOf("shape-meta")).containsExactly("ORDER-M1", "ORDER-M2");
  }

  @Test
  void aHeaderDeclaredOnTheInterfaceIsNotTakenForThePayload() throws Exception {
    send("shape-interface", "BODY-1", "SAME-HEADER");
    send("shape-interface", "BODY-1", "SAME-HEADER");
    send("shape-interface", "BODY-2", "SAME-HEADER");

    await().atMost(WAIT).until(() -> committed("shape-interface") == 3);
    // Keyed by the payload, not by the header: BODY-2 is not a duplicate of BODY-1.
    assertThat(effectsOf("shape-interface")).containsExactly("BODY-1", "BODY-2");
  }

  @Test
  void aPrimitiveReturnTypeGetsZeroForADuplicateInsteadOfAnError() throws Exception {
    send("shape-int", "charge 4", "I-1");
    send("shape-int", "charge 4 again", "I-1");

    await().atMost(WAIT).until(() -> committed("shape-int") == 2);
    assertThat(effects("shape-int", "I-1")).isEqualTo(1);
    assertThat(Switches.failures).noneMatch(failure -> failure.contains("shape-int"));
  }

  @Test
  void aRetryableTopicSendsARecordWithoutKeyStraightToItsDeadLetterTopic() throws Exception {
    template.send(new ProducerRecord<>("shape-retryable", "no key")).get();

    List<ConsumerRecord<String, String>> deadLetters =
        SpringTestEnvironment.readTopic("shape-retryable-dlt", 1, WAIT);
    assertThat(deadLetters).hasSize(1);
    assertThat(SpringTestEnvironment.deadLetterReason(deadLetters.get(0)))
        .contains("DedupKeyMissingException");
    assertThat(SpringTestEnvironment.readTopic("shape-retryable-retry", 1, Duration.ofSeconds(2)))
        .as("no detour through the retry topic")
        .isEmpty();
    assertThat(Switches.calls.keySet()).noneMatch(call -> call.startsWith("shape-retryable"));
  }

  private void send(String topic, String value, String orderNo) throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(topic, value);
    record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
    template.send(record).get();
  }

  /** The listener's group (its id is its topic) committed offset of partition 0, -1 if none. */
  private long committed(String topic) throws Exception {
    return SpringTestEnvironment.committed(topic, topic, 0);
  }

  private int effects(String listener, String bizKey) {
    return SpringTestEnvironment.effects(jdbc, listener, bizKey);
  }

  private List<String> effectsOf(String listener) {
    return jdbc.queryForList(
        "SELECT biz_key FROM effects WHERE listener = ? ORDER BY at", String.class, listener);
  }

  static final class Switches {
    static final Map<String, AtomicInteger> calls = new ConcurrentHashMap<>();
    static final List<String> failures = new CopyOnWriteArrayList<>();

    /** Counts a call of {@code listener} for {@code orderNo}; returns which call it is. */
    static int call(String listener, String orderNo) {
      return calls
          .computeIfAbsent(listener + "/" + orderNo, k -> new AtomicInteger())
          .incrementAndGet();
    }
  }

  /** An interface whose parameter annotations spring-messaging honours on the implementation. */
  public interface InterfaceListener {
    void onBody(String body, @Header("order-no") String orderNo);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listeners listeners(JdbcTemplate jdbc) {
      return new Listeners(jdbc);
    }

    @Bean
    InterfaceListenerImpl interfaceListener(JdbcTemplate jdbc) {
      return new InterfaceListenerImpl(jdbc);
    }

    @Bean
    RecordInterceptor<Object, Object> failureRecorder() {
      return SpringTestEnvironment.failureRecorder(Switches.failures);
    }

    /** Containers whose listeners acknowledge records themselves. */
    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> manualFactory(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory) {
      ConcurrentKafkaListenerContainerFactory<Object, Object> factory =
          new ConcurrentKafkaListenerContainerFactory<>();
      configurer.configure(factory, consumerFactory);
      factory.getContainerProperties().setAckMode(ContainerProperties.AckMode.MANUAL);
      return factory;
    }
  }

  static void effect(JdbcTemplate jdbc, String listener, String bizKey, String payload) {
    SpringTestEnvironment.effect(jdbc, listener, bizKey, payload);
  }

  static class Listeners {
    final JdbcTemplate jdbc;

    Listeners(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = "future", header = "order-no")
    @KafkaListener(id = "shape-future", topics = "shape-future")
    public CompletableFuture<Void> chargeLater(ConsumerRecord<String, String> record) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      int call = Switches.call("shape-future", orderNo);
      return CompletableFuture.runAsync(
          () -> {
            if (call == 1) {
              throw new IllegalStateException("the bank timed out");
            }
            effect(jdbc, "shape-future", orderNo, record.value());
          });
    }

    @Idempotent(bizType = "mono", header = "order-no")
    @KafkaListener(id = "shape-mono", topics = "shape-mono")
    public Mono<Void> chargeReactively(ConsumerRecord<String, String> record) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      int call = Switches.call("shape-mono", orderNo);
      return Mono.fromRunnable(
          () -> {
            if (call == 1) {
              throw new IllegalStateException("the bank timed out");
            }
            effect(jdbc, "shape-mono", orderNo, record.value());
          });
    }

    /** The first call asks for a redelivery with a nack, and returns normally. */
    @Idempotent(bizType = "nack", header = "order-no")
    @KafkaListener(id = "shape-nack", topics = "shape-nack", containerFactory = "manualFactory")
    public void chargeOrNack(ConsumerRecord<String, String> record, Acknowledgment ack) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      if (Switches.call("shape-nack", orderNo) == 1) {
        ack.nack(Duration.ofMillis(100));
        return;
      }
      effect(jdbc, "shape-nack", orderNo, record.value());
      ack.acknowledge();
    }

    @Idempotent(bizType = "manual", header = "order-no")
    @KafkaListener(id = "shape-manual", topics = "shape-manual", containerFactory = "manualFactory")
    public void chargeAndAcknowledge(ConsumerRecord<String, String> record, Acknowledgment ack) {
      effect(
          jdbc, "shape-manual", SpringTestEnvironment.header(record, "order-no"), record.value());
      ack.acknowledge();
    }

    /** The payload is the order number; the metadata parameter comes first. */
    @Idempotent(bizType = "meta", key = "#payload")
    @KafkaListener(id = "shape-meta", topics = "shape-meta")
    public void chargeWithMetadata(ConsumerRecordMetadata metadata, String orderNo) {
      effect(jdbc, "shape-meta", orderNo, metadata.topic());
    }

    @Idempotent(bizType = "int", header = "order-no")
    @KafkaListener(id = "shape-int", topics = "shape-int")
    public int chargeAndCount(ConsumerRecord<String, String> record) {
      effect(jdbc, "shape-int", SpringTestEnvironment.header(record, "order-no"), record.value());
      return 1;
    }

    @RetryableTopic(attempts = "3", backOff = @BackOff(delay = 100))
    @Idempotent(bizType = "retryable", header = "order-no")
    @KafkaListener(id = "shape-retryable", topics = "shape-retryable")
    public void chargeWithRetryTopics(ConsumerRecord<String, String> record) {
      Switches.call("shape-retryable", String.valueOf(record.offset()));
    }
  }

  static class InterfaceListenerImpl implements InterfaceListener {
    final JdbcTemplate jdbc;

    InterfaceListenerImpl(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Override
    @Idempotent(bizType = "interface", key = "#payload")
    @KafkaListener(id = "shape-interface", topics = "shape-interface")
    public void onBody(String body, String orderNo) {
      effect(jdbc, "shape-interface", body, orderNo);
    }
  }
}
