package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.IdempotentExecutor;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.kafka.autoconfigure.ConcurrentKafkaListenerContainerFactoryConfigurer;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.ApplicationListener;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ConcurrentKafkaListenerContainerFactory;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.ConsumerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.event.ConsumerPausedEvent;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * An {@code @Idempotent} batch listener in a container with {@code asyncAcks} and ack mode {@code
 * MANUAL}, whose batch's key another instance holds: the batch is held (retry later), and once the
 * holder has failed every record is applied once and acknowledged. spring-kafka forgets the offsets
 * it waits to be acknowledged out of order only on its own record-in-retry exception; a held batch
 * must not leave the consumer paused for them. A real PostgreSQL and the in-JVM broker.
 */
@SpringBootTest(classes = BatchAsyncAcksHoldTest.App.class)
@DirtiesContext
class BatchAsyncAcksHoldTest {
  static final Duration WAIT = Duration.ofSeconds(15);
  static final String TOPIC = "baa-orders";
  static final Map<String, AtomicInteger> effects = new ConcurrentHashMap<>();
  static final List<String> consumerPauses = new CopyOnWriteArrayList<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "batch_async_acks", TOPIC);
    registry.add("consumer-dedup.hold.initial-backoff", () -> "200ms");
    registry.add("consumer-dedup.hold.max-backoff", () -> "500ms");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void aBatchHeldForAKeyInProgressElsewhereIsAppliedOnceTheHolderFails() throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(TOPIC);
    assertThat(container.getContainerProperties().isAsyncAcks()).as("asyncAcks").isTrue();
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    try (IdempotentExecutor otherInstance =
        IdempotentExecutor.builder(store).ownerId("other-instance").build()) {
      DedupClaim claim = otherInstance.claim(DedupKey.of("baa", "B-2"), null, "elsewhere");
      SpringTestEnvironment.send(template, TOPIC, "payload", "order-no", "B-1");
      SpringTestEnvironment.send(template, TOPIC, "payload", "order-no", "B-2");
      SpringTestEnvironment.send(template, TOPIC, "payload", "order-no", "B-3");
      Thread.sleep(1500); // held meanwhile
      assertThat(effects.get("B-2")).as("B-2 applied while held elsewhere").isNull();
      claim.fail(new IllegalStateException("failed on the other instance"));
    }
    SpringTestEnvironment.send(template, TOPIC, "payload", "order-no", "B-4");
    await()
        .atMost(WAIT)
        .untilAsserted(
            () -> {
              assertThat(consumerPauses).as("whole-consumer pauses").isEmpty();
              assertThat(status("B-4")).as("B-4 status").isEqualTo(DedupStatus.SUCCESS);
            });
    assertThat(consumerPauses).as("whole-consumer pauses").isEmpty();
    for (String key : List.of("B-1", "B-2", "B-3", "B-4")) {
      assertThat(status(key)).as(key + " status").isEqualTo(DedupStatus.SUCCESS);
      assertThat(effects.get(key)).as(key + " applied").hasValue(1);
    }
  }

  private DedupStatus status(String orderNo) {
    return store.find(DedupKey.of("baa", orderNo)).map(DedupRecord::status).orElse(null);
  }

  static class Listener {
    @Idempotent(bizType = "baa", header = "order-no")
    @KafkaListener(
        id = TOPIC,
        topics = TOPIC,
        batch = "true",
        containerFactory = "asyncAcksFactory")
    public void onOrders(List<ConsumerRecord<String, String>> records, Acknowledgment ack) {
      for (ConsumerRecord<String, String> record : records) {
        String orderNo =
            new String(record.headers().lastHeader("order-no").value(), StandardCharsets.UTF_8);
        effects.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
      }
      ack.acknowledge();
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> asyncAcksFactory(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory) {
      ConcurrentKafkaListenerContainerFactory<Object, Object> factory =
          new ConcurrentKafkaListenerContainerFactory<>();
      configurer.configure(factory, consumerFactory);
      factory.getContainerProperties().setAckMode(ContainerProperties.AckMode.MANUAL);
      factory.getContainerProperties().setAsyncAcks(true);
      return factory;
    }

    @Bean
    ApplicationListener<ConsumerPausedEvent> consumerPauses() {
      return event -> consumerPauses.add(event.toString());
    }

    @Bean
    Listener listener() {
      return new Listener();
    }
  }
}
