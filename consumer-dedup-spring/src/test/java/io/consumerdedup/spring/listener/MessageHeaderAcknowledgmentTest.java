package io.consumerdedup.spring.listener;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TestDatabase;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.UUID;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.kafka.core.DefaultKafkaConsumerFactory;
import org.springframework.kafka.core.DefaultKafkaProducerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.CommonContainerStoppingErrorHandler;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.KafkaMessageListenerContainer;
import org.springframework.kafka.listener.adapter.HandlerAdapter;
import org.springframework.kafka.listener.adapter.RecordMessagingMessageListenerAdapter;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.kafka.support.KafkaHeaders;
import org.springframework.kafka.test.utils.KafkaTestUtils;
import org.springframework.messaging.Message;
import org.springframework.messaging.handler.annotation.support.DefaultMessageHandlerMethodFactory;

/**
 * A container built by hand, made idempotent by the record interceptor, whose listener is a method
 * taking {@code Message<?>} behind spring-kafka's messaging adapter, as a {@code @KafkaListener}'s
 * is: the acknowledgment in the message's header is the one consumer-dedup holds, as the adapter
 * builds the message from what the container hands it. Ack mode {@code MANUAL_IMMEDIATE}, and a
 * failure stops the container; a real PostgreSQL and the in-JVM broker.
 */
class MessageHeaderAcknowledgmentTest {
  private String schema;
  private HikariDataSource dataSource;
  private IdempotentExecutor executor;
  private String topic;

  @BeforeEach
  void setUp() {
    schema = TestDatabase.newSchema("spring_message_ack");
    dataSource = TestDatabase.dataSource(schema, 2);
    executor = IdempotentExecutor.builder(JdbcDedupStore.builder(dataSource).build()).build();
    topic = "hand-built-message-" + UUID.randomUUID().toString().substring(0, 8);
    TestKafka.createTopics(1, topic);
  }

  @AfterEach
  void tearDown() {
    executor.close();
    dataSource.close();
    TestDatabase.dropSchema(schema);
  }

  @Test
  void aHandBuiltContainersMessageListenerAcknowledgingThenFailingIsAppliedAfterARestart()
      throws Exception {
    Payments payments = new Payments();
    KafkaMessageListenerContainer<String, String> container = container(payments);
    IdempotentRecordInterceptor.decorate(container, executor, "payment");
    container.start();
    try {
      send("pay M", "M");
      await().atMost(Duration.ofSeconds(30)).until(() -> !container.isRunning());
      assertThat(payments.calls).as("calls before the stop").hasValue(1);
      assertThat(committed())
          .as(
              "the group's committed offset, its record (offset 0) acknowledged by a call that"
                  + " failed (key %s)",
              executor.store().find(DedupKey.of("payment", "M")).orElseThrow().status())
          .isLessThanOrEqualTo(0);

      container.start();
      await().atMost(Duration.ofSeconds(30)).until(() -> committed() == 1);
    } finally {
      container.stop();
    }
    assertThat(payments.applied).as("applied").containsExactly("pay M");
    assertThat(executor.store().find(DedupKey.of("payment", "M")).orElseThrow().status())
        .isEqualTo(DedupStatus.SUCCESS);
  }

  /** Acknowledges through the message's header, then fails at its first call. */
  public static class Payments {
    final AtomicInteger calls = new AtomicInteger();
    final List<String> applied = new CopyOnWriteArrayList<>();

    public void on(Message<String> message) {
      Acknowledgment ack =
          (Acknowledgment)
              Objects.requireNonNull(message.getHeaders().get(KafkaHeaders.ACKNOWLEDGMENT), "ack");
      ack.acknowledge();
      if (calls.incrementAndGet() == 1) {
        throw new IllegalStateException("a step after the acknowledgment failed");
      }
      applied.add(message.getPayload());
    }
  }

  private KafkaMessageListenerContainer<String, String> container(Payments payments)
      throws NoSuchMethodException {
    DefaultMessageHandlerMethodFactory methods = new DefaultMessageHandlerMethodFactory();
    methods.afterPropertiesSet();
    var method = Payments.class.getMethod("on", Message.class);
    RecordMessagingMessageListenerAdapter<String, String> adapter =
        new RecordMessagingMessageListenerAdapter<>(payments, method);
    adapter.setHandlerMethod(
        new HandlerAdapter(methods.createInvocableHandlerMethod(payments, method)));
    ContainerProperties properties = new ContainerProperties(topic);
    properties.setGroupId(topic);
    properties.setAckMode(ContainerProperties.AckMode.MANUAL_IMMEDIATE);
    properties.setMessageListener(adapter);
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
    container.setCommonErrorHandler(new CommonContainerStoppingErrorHandler());
    return container;
  }

  private void send(String value, String key) throws Exception {
    DefaultKafkaProducerFactory<String, String> producers =
        new DefaultKafkaProducerFactory<>(
            Map.of(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, TestKafka.bootstrapServers()),
            new StringSerializer(),
            new StringSerializer());
    try {
      ProducerRecord<String, String> record = new ProducerRecord<>(topic, value);
      record
          .headers()
          .add(
              IdempotentRecordInterceptor.DEFAULT_KEY_HEADER, key.getBytes(StandardCharsets.UTF_8));
      new KafkaTemplate<>(producers).send(record).get();
    } finally {
      producers.destroy();
    }
  }

  private long committed() throws Exception {
    OffsetAndMetadata offset =
        KafkaTestUtils.getCurrentOffset(TestKafka.bootstrapServers(), topic, topic, 0);
    return offset == null ? -1 : offset.offset();
  }
}
