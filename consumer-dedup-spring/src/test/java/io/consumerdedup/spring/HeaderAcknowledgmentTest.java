package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.committed;
import static io.consumerdedup.spring.SpringTestEnvironment.effect;
import static io.consumerdedup.spring.SpringTestEnvironment.effects;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
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
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.Consumer;
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
import org.springframework.kafka.support.KafkaHeaders;
import org.springframework.messaging.Message;
import org.springframework.messaging.MessageHeaders;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.messaging.handler.annotation.Headers;
import org.springframework.messaging.handler.annotation.Payload;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * {@code @Idempotent} listeners that reach their {@code Acknowledgment} through the message rather
 * than an argument of its own: a {@code Message<?>}, its headers as {@code @Headers Map} or {@code
 * MessageHeaders}, {@code @Header(KafkaHeaders.ACKNOWLEDGMENT)}, or each message of a batch's
 * {@code List<Message<?>>}. Ack mode {@code MANUAL_IMMEDIATE}, whose acknowledgment commits at
 * once, and a failure stops the container, as a process dying before the retry would. Each listener
 * acknowledges, then fails at its first call: the record must come again after the restart and be
 * applied once, not be skipped past an offset committed for a call that failed. A real PostgreSQL
 * and the in-JVM broker.
 */
@SpringBootTest(classes = HeaderAcknowledgmentTest.App.class)
@DirtiesContext
class HeaderAcknowledgmentTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final String MESSAGE = "hdrack-message";
  static final String MANUAL = "hdrack-manual";
  static final String HEADERS_MAP = "hdrack-headers-map";
  static final String MESSAGE_HEADERS = "hdrack-message-headers";
  static final String HEADER = "hdrack-header";
  static final String BATCH = "hdrack-batch";
  static final String DUPLICATE = "hdrack-duplicate";
  static final String CONSUMER_HEADER = "hdrack-consumer-header";
  static final Map<String, AtomicInteger> calls = new ConcurrentHashMap<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry,
        "hdrack",
        MESSAGE,
        MANUAL,
        HEADERS_MAP,
        MESSAGE_HEADERS,
        HEADER,
        BATCH,
        DUPLICATE,
        CONSUMER_HEADER);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void aMessageListenerThatAcknowledgesThroughTheHeaderThenFailsHasItsRecordAppliedAfterARestart()
      throws Exception {
    acknowledgedThenFailedIsAppliedOnceAfterARestart(MESSAGE);
  }

  /** Ack mode {@code MANUAL}: spring-kafka commits what was acknowledged as it stops. */
  @Test
  void inManualAckModeAMessageListenerAcknowledgingThenFailingHasItsRecordAppliedAfterARestart()
      throws Exception {
    acknowledgedThenFailedIsAppliedOnceAfterARestart(MANUAL);
  }

  @Test
  void aListenerTakingTheHeadersMapThatAcknowledgesThenFailsHasItsRecordAppliedAfterARestart()
      throws Exception {
    acknowledgedThenFailedIsAppliedOnceAfterARestart(HEADERS_MAP);
  }

  @Test
  void aListenerTakingMessageHeadersThatAcknowledgesThenFailsHasItsRecordAppliedAfterARestart()
      throws Exception {
    acknowledgedThenFailedIsAppliedOnceAfterARestart(MESSAGE_HEADERS);
  }

  @Test
  void aListenerTakingTheAcknowledgmentHeaderThatAcknowledgesThenFailsHasItsRecordApplied()
      throws Exception {
    acknowledgedThenFailedIsAppliedOnceAfterARestart(HEADER);
  }

  /**
   * A batch listener's acknowledgment says its records are done: their SUCCESS stands when the
   * method fails after it, so that a copy of a record arriving later is a duplicate.
   */
  @Test
  void aBatchAcknowledgedThroughAMessageHeaderStaysDoneWhenTheListenerThenFails() throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(BATCH);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    long offset = send(template, BATCH, "credit 5", "order-no", "B-1");
    await().atMost(WAIT).until(() -> !container.isRunning());

    container.start();
    await().atMost(WAIT).until(() -> committed(BATCH, BATCH, 0) > offset);
    DedupStatus acknowledged =
        store.find(DedupKey.of(BATCH, "B-1")).map(DedupRecord::status).orElse(null);
    long copy = send(template, BATCH, "credit 5", "order-no", "B-1");
    await().atMost(WAIT).until(() -> committed(BATCH, BATCH, 0) > copy);
    assertThat(effects(jdbc, BATCH, "B-1"))
        .as(
            "B-1 applied, acknowledged before the failure (its key then %s), then its copy",
            acknowledged)
        .isEqualTo(1);
    assertThat(calls.get(BATCH)).as("calls, the copy not among them").hasValue(1);
  }

  /** The consumer its messages carry ({@code KafkaHeaders.CONSUMER}) commits its positions. */
  @Test
  void aBatchCommittedThroughTheConsumerHeaderThenFailingHasItsRecordAppliedAfterARestart()
      throws Exception {
    acknowledgedThenFailedIsAppliedOnceAfterARestart(CONSUMER_HEADER);
  }

  @Test
  void aDuplicateOfAMessageListenerIsAcknowledgedThroughItsHeader() throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(DUPLICATE);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    send(template, DUPLICATE, "credit 5", "order-no", "D-1");
    await().atMost(WAIT).until(() -> committed(DUPLICATE, DUPLICATE, 0) == 1);

    long copy = send(template, DUPLICATE, "credit 5", "order-no", "D-1");
    await()
        .atMost(WAIT)
        .alias("the group's committed offset past the duplicate at offset " + copy)
        .until(() -> committed(DUPLICATE, DUPLICATE, 0) == copy + 1);
    assertThat(calls.get(DUPLICATE)).as("calls, the duplicate not among them").hasValue(1);
    assertThat(effects(jdbc, DUPLICATE, "D-1")).as("D-1 applied").isEqualTo(1);
  }

  /**
   * The listener of {@code topic} acknowledges (or commits) its first record, then fails, which
   * stops its container; started again, the record must come again and be applied once.
   */
  private void acknowledgedThenFailedIsAppliedOnceAfterARestart(String topic) throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(topic);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    String orderNo = topic + "-1";
    long offset = send(template, topic, "credit 5", "order-no", orderNo);

    await().atMost(WAIT).until(() -> !container.isRunning());
    assertThat(calls.get(topic)).as("calls before the stop").hasValue(1);
    assertThat(committed(topic, topic, 0))
        .as(
            "the group's committed offset, its record (offset %d) acknowledged by a call that"
                + " failed (key %s)",
            offset, store.find(DedupKey.of(topic, orderNo)).map(DedupRecord::status).orElse(null))
        .isLessThanOrEqualTo(offset);

    container.start();
    await()
        .atMost(WAIT)
        .alias("effect of " + orderNo + " after the restart")
        .until(() -> effects(jdbc, topic, orderNo) == 1);
    await().atMost(WAIT).until(() -> committed(topic, topic, 0) > offset);
    assertThat(calls.get(topic)).as("the failed call, then the one after the restart").hasValue(2);
    assertThat(effects(jdbc, topic, orderNo)).as("%s applied", orderNo).isEqualTo(1);
  }

  static class Listeners {
    final JdbcTemplate jdbc;

    Listeners(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = MESSAGE, header = "order-no")
    @KafkaListener(id = MESSAGE, topics = MESSAGE, containerFactory = "immediateStopping")
    public void onMessage(Message<String> message) {
      acknowledgeThenApply(MESSAGE, message.getHeaders(), message.getPayload());
    }

    @Idempotent(bizType = MANUAL, header = "order-no")
    @KafkaListener(id = MANUAL, topics = MANUAL, containerFactory = "manualStopping")
    public void onManual(Message<String> message) {
      acknowledgeThenApply(MANUAL, message.getHeaders(), message.getPayload());
    }

    @Idempotent(bizType = HEADERS_MAP, header = "order-no")
    @KafkaListener(id = HEADERS_MAP, topics = HEADERS_MAP, containerFactory = "immediateStopping")
    public void onHeadersMap(@Payload String payload, @Headers Map<String, Object> headers) {
      acknowledgeThenApply(HEADERS_MAP, headers, payload);
    }

    @Idempotent(bizType = MESSAGE_HEADERS, header = "order-no")
    @KafkaListener(
        id = MESSAGE_HEADERS,
        topics = MESSAGE_HEADERS,
        containerFactory = "immediateStopping")
    public void onMessageHeaders(String payload, MessageHeaders headers) {
      acknowledgeThenApply(MESSAGE_HEADERS, headers, payload);
    }

    @Idempotent(bizType = HEADER, header = "order-no")
    @KafkaListener(id = HEADER, topics = HEADER, containerFactory = "immediateStopping")
    public void onHeader(
        String payload,
        @Header("order-no") String orderNo,
        @Header(KafkaHeaders.ACKNOWLEDGMENT) Acknowledgment ack) {
      ack.acknowledge();
      if (calls.computeIfAbsent(HEADER, k -> new AtomicInteger()).incrementAndGet() == 1) {
        throw new IllegalStateException("a step after the acknowledgment failed");
      }
      effect(jdbc, HEADER, orderNo, payload);
    }

    @Idempotent(bizType = BATCH, header = "order-no")
    @KafkaListener(
        id = BATCH,
        topics = BATCH,
        batch = "true",
        containerFactory = "immediateStopping")
    public void onBatch(List<Message<String>> messages) {
      for (Message<String> message : messages) {
        effect(jdbc, BATCH, orderNo(message.getHeaders()), message.getPayload());
      }
      acknowledgment(messages.get(0).getHeaders()).acknowledge();
      if (calls.computeIfAbsent(BATCH, k -> new AtomicInteger()).incrementAndGet() == 1) {
        throw new IllegalStateException("a step after the acknowledgment failed");
      }
    }

    @Idempotent(bizType = CONSUMER_HEADER, header = "order-no")
    @KafkaListener(
        id = CONSUMER_HEADER,
        topics = CONSUMER_HEADER,
        batch = "true",
        containerFactory = "immediateStopping")
    public void onConsumerHeader(List<Message<String>> messages) {
      ((Consumer<?, ?>) messages.get(0).getHeaders().get(KafkaHeaders.CONSUMER)).commitSync();
      if (calls.computeIfAbsent(CONSUMER_HEADER, k -> new AtomicInteger()).incrementAndGet() == 1) {
        throw new IllegalStateException("a step after the commit failed");
      }
      for (Message<String> message : messages) {
        effect(jdbc, CONSUMER_HEADER, orderNo(message.getHeaders()), message.getPayload());
      }
      acknowledgment(messages.get(0).getHeaders()).acknowledge();
    }

    @Idempotent(bizType = DUPLICATE, header = "order-no")
    @KafkaListener(id = DUPLICATE, topics = DUPLICATE, containerFactory = "immediateStopping")
    public void onDuplicate(Message<String> message) {
      calls.computeIfAbsent(DUPLICATE, k -> new AtomicInteger()).incrementAndGet();
      effect(jdbc, DUPLICATE, orderNo(message.getHeaders()), message.getPayload());
      acknowledgment(message.getHeaders()).acknowledge();
    }

    /** Acknowledges, then fails at the first call (a step after the acknowledgment failed). */
    private void acknowledgeThenApply(String topic, Map<String, Object> headers, String payload) {
      acknowledgment(headers).acknowledge();
      if (calls.computeIfAbsent(topic, k -> new AtomicInteger()).incrementAndGet() == 1) {
        throw new IllegalStateException("a step after the acknowledgment failed");
      }
      effect(jdbc, topic, orderNo(headers), payload);
    }

    private static Acknowledgment acknowledgment(Map<String, Object> headers) {
      return (Acknowledgment)
          Objects.requireNonNull(headers.get(KafkaHeaders.ACKNOWLEDGMENT), "acknowledgment");
    }

    private static String orderNo(Map<String, Object> headers) {
      Object value = headers.get("order-no");
      return value instanceof byte[] bytes
          ? new String(bytes, StandardCharsets.UTF_8)
          : String.valueOf(value);
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listeners listeners(JdbcTemplate jdbc) {
      return new Listeners(jdbc);
    }

    /** Acknowledged offsets committed after the listener returns; a failure stops it. */
    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> manualStopping(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory) {
      ConcurrentKafkaListenerContainerFactory<Object, Object> factory =
          new ConcurrentKafkaListenerContainerFactory<>();
      configurer.configure(factory, consumerFactory);
      factory.getContainerProperties().setAckMode(AckMode.MANUAL);
      factory.setCommonErrorHandler(new CommonContainerStoppingErrorHandler());
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
