package io.consumerdedup.spring.listener;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TestDatabase;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.kafka.clients.consumer.ConsumerConfig;
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
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.KafkaMessageListenerContainer;
import org.springframework.kafka.listener.MessageListener;
import org.springframework.kafka.listener.RecordInterceptor;
import org.springframework.kafka.test.EmbeddedKafkaBroker;
import org.springframework.kafka.test.context.EmbeddedKafka;
import org.springframework.util.backoff.FixedBackOff;

/** A container built by hand, without Spring Boot, made idempotent at the container level. */
@EmbeddedKafka(partitions = 1, topics = "hand-built")
class IdempotentMessageListenerTest {
  private String schema;
  private HikariDataSource dataSource;
  private IdempotentExecutor executor;

  @BeforeEach
  void setUp() {
    schema = TestDatabase.newSchema("spring_listener");
    dataSource = TestDatabase.dataSource(schema, 2);
    executor = IdempotentExecutor.builder(JdbcDedupStore.builder(dataSource).build()).build();
  }

  @AfterEach
  void tearDown() {
    executor.close();
    dataSource.close();
    TestDatabase.dropSchema(schema);
  }

  @Test
  void containerListenerKeyedByTheHeaderConventionAppliesEachKeyOnce(EmbeddedKafkaBroker kafka)
      throws Exception {
    List<String> applied = new CopyOnWriteArrayList<>();
    List<String> intercepted = new CopyOnWriteArrayList<>();
    ContainerProperties properties = new ContainerProperties("hand-built");
    properties.setGroupId("hand-built");
    properties.setMessageListener(
        (MessageListener<String, String>) record -> applied.add(record.value()));
    KafkaMessageListenerContainer<String, String> container =
        new KafkaMessageListenerContainer<>(
            new DefaultKafkaConsumerFactory<>(
                Map.of(
                    ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG,
                    kafka.getBrokersAsString(),
                    ConsumerConfig.AUTO_OFFSET_RESET_CONFIG,
                    "earliest"),
                new StringDeserializer(),
                new StringDeserializer()),
            properties);
    RecordInterceptor<String, String> ownInterceptor =
        (record, consumer) -> {
          intercepted.add(record.value());
          return record;
        };
    container.setRecordInterceptor(ownInterceptor);
    container.setCommonErrorHandler(new DefaultErrorHandler(new FixedBackOff(0, 5)));

    IdempotentMessageListener.decorate(container, executor, "payment");
    container.start();
    DefaultKafkaProducerFactory<String, String> producers =
        new DefaultKafkaProducerFactory<>(
            Map.of(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, kafka.getBrokersAsString()),
            new StringSerializer(),
            new StringSerializer());
    try {
      KafkaTemplate<String, String> template = new KafkaTemplate<>(producers);
      for (String value :
          List.of("pay A", "pay A again", "pay B", "pay A once more", "no key", "pay C")) {
        ProducerRecord<String, String> record = new ProducerRecord<>("hand-built", value);
        String key = value.equals("no key") ? null : value.substring(4, 5);
        if (key != null) {
          record
              .headers()
              .add(
                  IdempotentMessageListener.DEFAULT_KEY_HEADER,
                  key.getBytes(StandardCharsets.UTF_8));
        }
        template.send(record).get();
      }
      await().atMost(Duration.ofSeconds(30)).until(() -> applied.contains("pay C"));
    } finally {
      container.stop();
      producers.destroy();
    }

    assertThat(applied).containsExactly("pay A", "pay B", "pay C");
    // Six deliveries, no more: the record without a key was not retried (not retryable).
    assertThat(intercepted).hasSize(6);
    assertThat(container.getRecordInterceptor()).isSameAs(ownInterceptor);
    assertThat(executor.store().find(DedupKey.of("payment", "A")).orElseThrow().status())
        .isEqualTo(DedupStatus.SUCCESS);
    assertThat(executor.store().find(DedupKey.of("payment", "A")).orElseThrow().source())
        .get()
        .asString()
        .contains("hand-built-0@0")
        .contains("group hand-built");
  }

  @Test
  void decoratingARunningContainerOrABatchListenerIsRefused() {
    ContainerProperties properties = new ContainerProperties("hand-built");
    properties.setMessageListener(
        (org.springframework.kafka.listener.BatchMessageListener<String, String>) records -> {});
    KafkaMessageListenerContainer<String, String> container =
        new KafkaMessageListenerContainer<>(
            new DefaultKafkaConsumerFactory<String, String>(Map.of()), properties);
    org.assertj.core.api.Assertions.assertThatThrownBy(
            () -> IdempotentMessageListener.decorate(container, executor, "payment"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("record listeners");
  }
}
