package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.committed;
import static io.consumerdedup.spring.SpringTestEnvironment.effect;
import static io.consumerdedup.spring.SpringTestEnvironment.effects;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.kafka.autoconfigure.ConcurrentKafkaListenerContainerFactoryConfigurer;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ConcurrentKafkaListenerContainerFactory;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.ConsumerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.ContainerProperties.AckMode;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.kafka.support.KafkaHeaders;
import org.springframework.kafka.support.KafkaMessageHeaderAccessor;
import org.springframework.kafka.support.converter.KafkaMessageHeaders;
import org.springframework.messaging.Message;
import org.springframework.messaging.handler.annotation.Headers;
import org.springframework.messaging.handler.annotation.Payload;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * Records whose producer set headers named {@code id} and {@code timestamp}, as producers outside
 * Spring often do: spring-kafka copies every record header into the message, as {@code byte[]}, so
 * the message's {@code id} and {@code timestamp} are not the {@code UUID} and {@code Long}
 * spring-messaging makes. {@code @Idempotent} listeners taking the message or its headers, whose
 * acknowledgment consumer-dedup hands over in the headers, must apply such records once and see
 * every header as it came. Also the other ways to the headers: spring-kafka's own {@code
 * KafkaMessageHeaders}, and a {@code KafkaMessageHeaderAccessor} to acknowledge through. A real
 * PostgreSQL and the in-JVM broker.
 */
@SpringBootTest(classes = RecordHeadersNamedLikeMessageHeadersTest.App.class)
@DirtiesContext
@ExtendWith(OutputCaptureExtension.class)
class RecordHeadersNamedLikeMessageHeadersTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final String MESSAGE = "hdrid-message";
  static final String BATCH = "hdrid-batch";
  static final String ASYNC = "hdrid-async";
  static final String KAFKA_HEADERS = "hdrid-kafka-headers";
  static final String ACCESSOR = "hdrid-accessor";
  static final String PRODUCER_ID = "a1b2c3-set-by-a-producer";
  static final String PRODUCER_TIMESTAMP = "2026-12-07T10:00:00Z";

  /** The headers each listener was given, by topic. */
  static final Map<String, Map<String, Object>> seen = new ConcurrentHashMap<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry, "hdrid", MESSAGE, BATCH, ASYNC, KAFKA_HEADERS, ACCESSOR);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void aMessageListenerAppliesARecordWithIdAndTimestampHeadersAndSeesThemAsSent() throws Exception {
    appliedOnceWithItsHeadersAsSent(MESSAGE);
    assertThat(seen.get(MESSAGE))
        .as("the message's headers, of spring-kafka's class as the container made them")
        .isInstanceOf(KafkaMessageHeaders.class);
  }

  @Test
  void aBatchOfMessagesAppliesARecordWithIdAndTimestampHeadersAndSeesThemAsSent() throws Exception {
    appliedOnceWithItsHeadersAsSent(BATCH);
  }

  /** Spring-kafka runs a listener returning a future in ack mode MANUAL, whatever is set. */
  @Test
  void anAsyncMessageListenerAppliesARecordWithIdAndTimestampHeadersAndSeesThemAsSent()
      throws Exception {
    appliedOnceWithItsHeadersAsSent(ASYNC);
  }

  @Test
  void aListenerTakingKafkaMessageHeadersIsGivenThemWithTheAcknowledgment() throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(KAFKA_HEADERS);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    String orderNo = KAFKA_HEADERS + "-1";
    long offset = send(template, KAFKA_HEADERS, "credit 5", "order-no", orderNo);

    await()
        .atMost(WAIT)
        .untilAsserted(
            () -> assertThat(effects(jdbc, KAFKA_HEADERS, orderNo)).as(orderNo).isEqualTo(1));
    await().atMost(WAIT).until(() -> committed(KAFKA_HEADERS, KAFKA_HEADERS, 0) > offset);
    assertThat(bytes(seen.get(KAFKA_HEADERS), "order-no")).isEqualTo(orderNo);
  }

  /**
   * Ack mode MANUAL: the accessor reaches the acknowledgment, so no WARN says that spring-kafka
   * commits none of the listener's offsets, and its record is committed.
   */
  @Test
  void aListenerAcknowledgingThroughAHeaderAccessorIsNotWarnedOf(CapturedOutput output)
      throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(ACCESSOR);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    String orderNo = ACCESSOR + "-1";
    long offset = send(template, ACCESSOR, "credit 5", "order-no", orderNo);

    await()
        .atMost(WAIT)
        .alias("the group's committed offset past " + offset)
        .until(() -> committed(ACCESSOR, ACCESSOR, 0) > offset);
    assertThat(effects(jdbc, ACCESSOR, orderNo)).as("%s applied", orderNo).isEqualTo(1);
    assertThat(output.getAll().lines().filter(line -> line.contains("Listeners#onAccessor")))
        .as("lines naming the listener, which acknowledges through its header accessor")
        .noneMatch(line -> line.contains("takes no Acknowledgment"));
  }

  /**
   * Sends a record with headers {@code id}, {@code timestamp} and the key's: its listener must
   * apply it once, its offset be committed, and the listener see each header as it was sent.
   */
  private void appliedOnceWithItsHeadersAsSent(String topic) throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(topic);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    String orderNo = topic + "-1";
    long offset =
        send(
            template,
            topic,
            "credit 5",
            "id",
            PRODUCER_ID,
            "timestamp",
            PRODUCER_TIMESTAMP,
            "order-no",
            orderNo);

    await()
        .atMost(WAIT)
        .untilAsserted(
            () ->
                assertThat(effects(jdbc, topic, orderNo))
                    .as("%s applied, its record having headers id and timestamp", orderNo)
                    .isEqualTo(1));
    await()
        .atMost(WAIT)
        .alias("the group's committed offset past " + offset)
        .until(() -> committed(topic, topic, 0) > offset);
    Map<String, Object> headers = seen.get(topic);
    assertThat(bytes(headers, "id")).as("header id").isEqualTo(PRODUCER_ID);
    assertThat(bytes(headers, "timestamp")).as("header timestamp").isEqualTo(PRODUCER_TIMESTAMP);
    assertThat(bytes(headers, "order-no")).as("header order-no").isEqualTo(orderNo);
    assertThat(effects(jdbc, topic, orderNo)).as("%s applied", orderNo).isEqualTo(1);
  }

  /** The header {@code name}, which must be the bytes the producer sent, as text. */
  private static String bytes(Map<String, Object> headers, String name) {
    assertThat(headers.get(name)).as("header %s", name).isInstanceOf(byte[].class);
    return new String((byte[]) headers.get(name), StandardCharsets.UTF_8);
  }

  static class Listeners {
    final JdbcTemplate jdbc;

    Listeners(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = MESSAGE, header = "order-no")
    @KafkaListener(id = MESSAGE, topics = MESSAGE, containerFactory = "immediate")
    public void onMessage(Message<String> message) {
      seen.put(MESSAGE, message.getHeaders());
      apply(MESSAGE, message);
      acknowledgment(message.getHeaders()).acknowledge();
    }

    @Idempotent(bizType = BATCH, header = "order-no")
    @KafkaListener(id = BATCH, topics = BATCH, batch = "true", containerFactory = "immediate")
    public void onBatch(List<Message<String>> messages) {
      for (Message<String> message : messages) {
        seen.put(BATCH, message.getHeaders());
        apply(BATCH, message);
      }
      acknowledgment(messages.get(0).getHeaders()).acknowledge();
    }

    @Idempotent(bizType = ASYNC, header = "order-no")
    @KafkaListener(id = ASYNC, topics = ASYNC)
    public CompletableFuture<Void> onAsync(Message<String> message) {
      seen.put(ASYNC, message.getHeaders());
      return CompletableFuture.runAsync(() -> apply(ASYNC, message));
    }

    @Idempotent(bizType = KAFKA_HEADERS, header = "order-no")
    @KafkaListener(id = KAFKA_HEADERS, topics = KAFKA_HEADERS, containerFactory = "immediate")
    public void onKafkaHeaders(@Payload String payload, @Headers KafkaMessageHeaders headers) {
      seen.put(KAFKA_HEADERS, new HashMap<>(headers.getRawHeaders()));
      effect(jdbc, KAFKA_HEADERS, orderNo(headers), payload);
      acknowledgment(headers).acknowledge();
    }

    @Idempotent(bizType = ACCESSOR, header = "order-no")
    @KafkaListener(id = ACCESSOR, topics = ACCESSOR, containerFactory = "manual")
    public void onAccessor(@Payload String payload, KafkaMessageHeaderAccessor accessor) {
      effect(jdbc, ACCESSOR, orderNo(accessor.toMap()), payload);
      accessor.getHeader(KafkaHeaders.ACKNOWLEDGMENT, Acknowledgment.class).acknowledge();
    }

    private void apply(String topic, Message<String> message) {
      effect(jdbc, topic, orderNo(message.getHeaders()), message.getPayload());
    }

    private static Acknowledgment acknowledgment(Map<String, Object> headers) {
      return (Acknowledgment) headers.get(KafkaHeaders.ACKNOWLEDGMENT);
    }

    private static String orderNo(Map<String, Object> headers) {
      return new String((byte[]) headers.get("order-no"), StandardCharsets.UTF_8);
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listeners listeners(JdbcTemplate jdbc) {
      return new Listeners(jdbc);
    }

    /** Acknowledged offsets committed at once; a failure retried, then skipped, as by default. */
    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> immediate(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory) {
      return factory(configurer, consumerFactory, AckMode.MANUAL_IMMEDIATE);
    }

    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> manual(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory) {
      return factory(configurer, consumerFactory, AckMode.MANUAL);
    }

    private static ConcurrentKafkaListenerContainerFactory<Object, Object> factory(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory,
        AckMode ackMode) {
      ConcurrentKafkaListenerContainerFactory<Object, Object> factory =
          new ConcurrentKafkaListenerContainerFactory<>();
      configurer.configure(factory, consumerFactory);
      factory.getContainerProperties().setAckMode(ackMode);
      return factory;
    }
  }
}
