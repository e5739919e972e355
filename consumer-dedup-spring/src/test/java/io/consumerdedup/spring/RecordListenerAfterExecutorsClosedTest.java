package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.testing.TestDatabase;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.slf4j.LoggerFactory;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.messaging.handler.annotation.Header;

/**
 * A record listener of a consumer group whose container still delivers once the application's
 * executors closed, as one does when its stop outlasts the shutdown phase's timeout and the context
 * goes on to destroy its beans. The executors built a new executor for the call, which claimed, ran
 * the listener and had the offset committed on machinery nobody closes. Now the call is refused
 * ({@code RETRY_LATER}): the record is not run, its offset not committed, and the next application
 * of the group runs it once. Two applications one after the other on a real PostgreSQL and the
 * in-JVM broker.
 */
class RecordListenerAfterExecutorsClosedTest {
  static final Duration WAIT = Duration.ofSeconds(60);
  static final String TOPIC = "eac-orders";
  static final Map<String, AtomicInteger> effects = new ConcurrentHashMap<>();

  private final ListAppender<ILoggingEvent> holds = new ListAppender<>();
  private final Logger errorHandlerLog =
      (Logger) LoggerFactory.getLogger(RetryLaterErrorHandler.class);
  private String schema;

  @BeforeEach
  void setUp() {
    TestKafka.createTopics(1, TOPIC);
    schema = TestDatabase.newSchema("record_after_close");
  }

  @AfterEach
  void tearDown() {
    errorHandlerLog.detachAppender(holds);
    TestDatabase.dropSchema(schema);
  }

  @Test
  void aRecordDeliveredAfterTheExecutorsClosedIsNotRunNorCommittedAndTheNextConsumerRunsItOnce()
      throws Exception {
    try (ConfigurableApplicationContext first = start()) {
      // After the start, which configures logging afresh (dropping appenders added before).
      holds.start();
      errorHandlerLog.addAppender(holds);
      MessageListenerContainer container =
          first.getBean(KafkaListenerEndpointRegistry.class).getListenerContainer(TOPIC);
      await()
          .atMost(WAIT)
          .until(
              () ->
                  container.getAssignedPartitions() != null
                      && !container.getAssignedPartitions().isEmpty());

      // What the context's destroy does after the shutdown phase timed out, the container running.
      first.getBean(IdempotentExecutors.class).close();
      try (KafkaProducer<String, String> producer = TestKafka.producer()) {
        ProducerRecord<String, String> record = new ProducerRecord<>(TOPIC, "charge 5.00");
        record.headers().add("order-no", "C-1".getBytes(StandardCharsets.UTF_8));
        producer.send(record).get();
      }
      await()
          .atMost(WAIT)
          .alias("the container handed the record to the listener")
          .until(
              () ->
                  effects.containsKey("C-1")
                      || holds.list.stream()
                          .anyMatch(e -> e.getFormattedMessage().contains("executor is closed")));

      assertThat(effects).as("records applied once the executors closed").isEmpty();
      assertThat(TestKafka.committedOffsets(TOPIC).getOrDefault(new TopicPartition(TOPIC, 0), 0L))
          .as("the group's committed offset, not past the record")
          .isZero();
    }

    try (ConfigurableApplicationContext restarted = start()) {
      DedupStore store = restarted.getBean(IdempotentExecutors.class).store();
      await()
          .atMost(WAIT)
          .until(
              () ->
                  store.find(DedupKey.of("eac", "C-1")).map(DedupRecord::status).orElse(null)
                      == DedupStatus.SUCCESS);
    }
    assertThat(effects).containsOnlyKeys("C-1");
    assertThat(effects.get("C-1")).as("times the record was applied").hasValue(1);
  }

  private ConfigurableApplicationContext start() {
    return new SpringApplicationBuilder(App.class)
        .properties(
            "spring.datasource.url=" + TestDatabase.url(schema),
            "spring.datasource.hikari.maximum-pool-size=4",
            "spring.kafka.bootstrap-servers=" + TestKafka.bootstrapServers(),
            "spring.kafka.consumer.auto-offset-reset=earliest",
            "consumer-dedup.hold.initial-backoff=200ms",
            "consumer-dedup.hold.max-backoff=1s",
            "consumer-dedup.cleanup.enabled=false",
            "spring.main.banner-mode=off",
            "spring.main.web-application-type=none")
        .run();
  }

  static class Listener {
    @Idempotent(bizType = "eac", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    void onOrder(String payload, @Header("order-no") String orderNo) {
      effects.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listener listener() {
      return new Listener();
    }
  }
}
