package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.IdempotentExecutor;
import java.time.Duration;
import java.util.List;
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
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.adapter.RecordFilterStrategy;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A batch listener behind a record filter, in ack mode MANUAL with {@code ackDiscarded}, whose
 * batch stops at a key another consumer holds: the auto-configured {@link RetryLaterErrorHandler}
 * must commit the records before it (the filtered one among them), hold it and those after it, and
 * apply them once the holder lets go. A real PostgreSQL and the in-JVM broker.
 */
@SpringBootTest(classes = BatchRecordFilterHoldTest.App.class)
@DirtiesContext
class BatchRecordFilterHoldTest {
  static final Duration WAIT = Duration.ofSeconds(15);
  static final String TOPIC = "bfh-orders";

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "batch_filter_hold", TOPIC);
    registry.add("consumer-dedup.hold.initial-backoff", () -> "200ms");
    registry.add("consumer-dedup.hold.max-backoff", () -> "500ms");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry registry;

  @Test
  void aKeyHeldElsewhereBehindAFilterWaitsAndIsAppliedOnce() throws Exception {
    try (IdempotentExecutor other =
        IdempotentExecutor.builder(store).ownerId("other-consumer").build()) {
      DedupClaim held =
          other.claim(DedupKey.of("bfh", "F-3"), null, "another consumer, its lease live");
      send(template, TOPIC, "apply", "order-no", "F-1");
      send(template, TOPIC, "skip", "order-no", "F-2");
      send(template, TOPIC, "apply", "order-no", "F-3");
      send(template, TOPIC, "apply", "order-no", "F-4");
      registry.getListenerContainer(TOPIC).start();

      await().atMost(WAIT).until(() -> effects("F-1") == 1);
      Thread.sleep(2_000);
      assertThat(committed()).as("committed while F-3 is held").isBetween(-1L, 2L);
      assertThat(effects("F-3")).as("F-3 applied while held elsewhere").isZero();
      assertThat(effects("F-4")).as("F-4 applied while F-3 waits").isZero();

      held.fail(new IllegalStateException("the other consumer's lease ends"));
      await().atMost(WAIT).until(() -> committed() == 4);
    }
    assertThat(effects("F-1")).as("F-1 applied").isEqualTo(1);
    assertThat(effects("F-2")).as("F-2, filtered out, applied").isZero();
    assertThat(effects("F-3")).as("F-3 applied").isEqualTo(1);
    assertThat(effects("F-4")).as("F-4 applied").isEqualTo(1);
  }

  private long committed() throws Exception {
    return SpringTestEnvironment.committed(TOPIC, TOPIC, 0);
  }

  private int effects(String bizKey) {
    return SpringTestEnvironment.effects(jdbc, "bfh", bizKey);
  }

  static class Listener {
    final JdbcTemplate jdbc;

    Listener(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = "bfh", header = "order-no")
    @KafkaListener(
        id = TOPIC,
        topics = TOPIC,
        batch = "true",
        filter = "skipMarked",
        containerFactory = "ackDiscardedFactory",
        autoStartup = "false")
    public void onOrders(List<ConsumerRecord<String, String>> records, Acknowledgment ack) {
      for (ConsumerRecord<String, String> record : records) {
        SpringTestEnvironment.effect(jdbc, "bfh", header(record, "order-no"), record.value());
      }
      ack.acknowledge();
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    RecordFilterStrategy<Object, Object> skipMarked() {
      return record -> "skip".equals(record.value());
    }

    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> ackDiscardedFactory(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory) {
      ConcurrentKafkaListenerContainerFactory<Object, Object> factory =
          new ConcurrentKafkaListenerContainerFactory<>();
      configurer.configure(factory, consumerFactory);
      factory.getContainerProperties().setAckMode(ContainerProperties.AckMode.MANUAL);
      factory.setAckDiscarded(true);
      return factory;
    }

    @Bean
    Listener listener(JdbcTemplate jdbc) {
      return new Listener(jdbc);
    }
  }
}
