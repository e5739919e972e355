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
  static final String LATE_NACK_TOPIC = "bda-payments";
  static final CompletableFuture<Throwable> lateNack = new CompletableFuture<>();
  static final Map<String, AtomicInteger> effects = new ConcurrentHashMap<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "batch_deferred_ack", TOPIC, LATE_NACK_TOPIC);
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

  /**
   * A nack made after the listener returned, from another thread: the batch's records are SUCCESS
   * and their offsets on their way to a commit, so the record cannot come again. Before, the nack
   * returned as if taken, and the record the application wanted again was never delivered again;
   * spring-kafka refuses such a nack with an IllegalStateException.
   */
  @Test
  void aNackMadeAfterTheListenerReturnedIsRefused() throws Exception {
    SpringTestEnvironment.send(template, LATE_NACK_TOPIC, "payload", "order-no", "N-1");
    containers.getListenerContainer(LATE_NACK_TOPIC).start();

    assertThat(lateNack.get(WAIT.toSeconds(), TimeUnit.SECONDS))
        .as("what the nack made after the listener returned answered")
        .isInstanceOf(IllegalStateException.class)
        .hasMessageContaining("returned");
    assertThat(store.find(DedupKey.of("bda-late", "N-1")).map(DedupRecord::status))
        .as("N-1 status")
        .contains(DedupStatus.SUCCESS);
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

  static class LateNackListener {
    @Idempotent(bizType = "bda-late", header = "order-no")
    @KafkaListener(
        id = LATE_NACK_TOPIC,
        topics = LATE_NACK_TOPIC,
        batch = "true",
        containerFactory = "manualFactory",
        autoStartup = "false")
    public void onPayments(List<ConsumerRecord<String, String>> records, Acknowledgment ack) {
      if (lateNack.isDone()) {
        ack.acknowledge();
        return;
      }
      CompletableFuture.runAsync(
          () -> {
            try {
              ack.nack(0, Duration.ZERO);
              lateNack.complete(null);
            } catch (RuntimeException e) {
              lateNack.complete(e);
            }
          },
          CompletableFuture.delayedExecutor(200, TimeUnit.MILLISECONDS));
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

    @Bean
    LateNackListener lateNackListener() {
      return new LateNackListener();
    }
  }
}
