package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.kafka.autoconfigure.ConcurrentKafkaListenerContainerFactoryConfigurer;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ConcurrentKafkaListenerContainerFactory;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.ConsumerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * An {@code @Idempotent} batch listener in ack mode {@code MANUAL} that acknowledges its batch
 * after it returned, from another thread (once the sends its records caused are confirmed, say),
 * which spring-kafka allows in that mode: the acknowledgment must reach the container, and the
 * offsets be committed. A real PostgreSQL and the in-JVM broker.
 */
@SpringBootTest(classes = BatchDeferredAckTest.App.class)
@DirtiesContext
class BatchDeferredAckTest {
  static final Duration WAIT = Duration.ofSeconds(10);
  static final String TOPIC = "bda-orders";
  static final Map<String, AtomicInteger> effects = new ConcurrentHashMap<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "batch_deferred_ack", TOPIC);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void anAcknowledgmentMadeAfterTheListenerReturnedCommitsTheBatch() throws Exception {
    SpringTestEnvironment.send(template, TOPIC, "payload", "order-no", "D-1");
    SpringTestEnvironment.send(template, TOPIC, "payload", "order-no", "D-2");
    containers.getListenerContainer(TOPIC).start();
    await()
        .atMost(WAIT)
        .untilAsserted(
            () -> {
              assertThat(status("D-1")).as("D-1 status").isEqualTo(DedupStatus.SUCCESS);
              assertThat(status("D-2")).as("D-2 status").isEqualTo(DedupStatus.SUCCESS);
            });
    await()
        .atMost(WAIT)
        .untilAsserted(
            () ->
                assertThat(SpringTestEnvironment.committed(TOPIC, TOPIC, 0))
                    .as("committed offset, the batch acknowledged after the listener returned")
                    .isEqualTo(2));
    assertThat(effects.get("D-1")).as("D-1 applied").hasValue(1);
    assertThat(effects.get("D-2")).as("D-2 applied").hasValue(1);
  }

  private DedupStatus status(String orderNo) {
    return store.find(DedupKey.of("bda", orderNo)).map(DedupRecord::status).orElse(null);
  }

  static class Listener {
    @Idempotent(bizType = "bda", header = "order-no")
    @KafkaListener(
        id = TOPIC,
        topics = TOPIC,
        batch = "true",
        containerFactory = "manualFactory",
        autoStartup = "false")
    public void onOrders(List<ConsumerRecord<String, String>> records, Acknowledgment ack) {
      for (ConsumerRecord<String, String> record : records) {
        effects
            .computeIfAbsent(
                SpringTestEnvironment.header(record, "order-no"), k -> new AtomicInteger())
            .incrementAndGet();
      }
      CompletableFuture.runAsync(
          ack::acknowledge, CompletableFuture.delayedExecutor(200, TimeUnit.MILLISECONDS));
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
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

    @Bean
    Listener listener() {
      return new Listener();
    }
  }
}
