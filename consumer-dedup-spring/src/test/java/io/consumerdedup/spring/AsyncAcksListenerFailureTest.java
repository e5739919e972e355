package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupStore;
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
import org.springframework.kafka.core.DefaultKafkaConsumerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.event.ConsumerPausedEvent;
import org.springframework.kafka.listener.AcknowledgingMessageListener;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.KafkaMessageListenerContainer;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.util.backoff.FixedBackOff;

/**
 * Record listeners in ack mode {@code MANUAL} with {@code asyncAcks}, an error handler that does
 * not seek and gives a failed record up (after one retry, or at once), and the second of four
 * records of one poll failing: the two after it must be applied once and committed. An
 * {@code @Idempotent} listener, and the same listener in a container consumer-dedup never
 * configured (spring-kafka alone). With a handler that seeks (spring-kafka's default), spring-kafka
 * alone leaves the consumer paused for the records it sought back (see docs/spring-boot.md). A real
 * PostgreSQL and the in-JVM broker.
 */
@SpringBootTest(classes = AsyncAcksListenerFailureTest.App.class)
@DirtiesContext
class AsyncAcksListenerFailureTest {
  static final Duration WAIT = Duration.ofSeconds(15);
  static final String NOT_SEEKING = "aalf-not-seeking";
  static final String NOT_SEEKING_ALONE = "aalf-not-seeking-alone";
  static final Map<String, AtomicInteger> calls = new ConcurrentHashMap<>();
  static final List<String> givenUp = new CopyOnWriteArrayList<>();
  static final List<String> consumerPauses = new CopyOnWriteArrayList<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "async_acks_failure", NOT_SEEKING, NOT_SEEKING_ALONE);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;
  @Autowired ConsumerFactory<Object, Object> consumerFactory;

  /**
   * An error handler that does not seek: spring-kafka goes on with the records after the failed one
   * in the same poll; consumer-dedup's handler seeks them back, which the container must be told.
   */
  @Test
  void anIdempotentListenersFailureUnderAHandlerThatDoesNotSeekLeavesTheRecordsAfterItApplied()
      throws Exception {
    send(NOT_SEEKING);
    containers.getListenerContainer(NOT_SEEKING).start();
    assertRecordsAfterTheFailedOneAppliedAndCommitted(NOT_SEEKING);
  }

  /** Without consumer-dedup: a container, and a consumer factory, it never configured. */
  @Test
  void springKafkaAloneWithAHandlerThatDoesNotSeek() throws Exception {
    runAlone(NOT_SEEKING_ALONE, notSeeking(givingUpAtOnce()));
  }

  private void runAlone(String topic, DefaultErrorHandler errorHandler) throws Exception {
    send(topic);
    ContainerProperties properties = new ContainerProperties(topic);
    properties.setGroupId(topic);
    properties.setAckMode(ContainerProperties.AckMode.MANUAL);
    properties.setAsyncAcks(true);
    properties.setMessageListener(
        (AcknowledgingMessageListener<String, String>)
            (record, ack) -> onRecord(topic, record, ack));
    KafkaMessageListenerContainer<String, String> container =
        new KafkaMessageListenerContainer<>(
            new DefaultKafkaConsumerFactory<>(consumerFactory.getConfigurationProperties()),
            properties);
    container.setCommonErrorHandler(errorHandler);
    container.setApplicationEventPublisher(
        event -> {
          if (event instanceof ConsumerPausedEvent) {
            consumerPauses.add(event.toString());
          }
        });
    container.start();
    try {
      assertRecordsAfterTheFailedOneAppliedAndCommitted(topic);
    } finally {
      container.stop();
    }
  }

  private void send(String topic) throws Exception {
    for (String orderNo : List.of("1", "2", "3", "4")) {
      SpringTestEnvironment.send(template, topic, orderNo, "order-no", orderNo);
    }
  }

  private static void assertRecordsAfterTheFailedOneAppliedAndCommitted(String topic) {
    await()
        .atMost(WAIT)
        .untilAsserted(
            () -> {
              assertThat(calls(topic, "3") + calls(topic, "4"))
                  .as("[" + topic + " calls of the records after the failed one]")
                  .isEqualTo(2);
              assertThat(SpringTestEnvironment.committed(topic, topic, 0))
                  .as("[" + topic + " committed offset]")
                  .isEqualTo(4L);
            });
    assertThat(givenUp).as("[records given up]").contains(topic + "@1");
    assertThat(consumerPauses)
        .as("[whole-consumer pauses]")
        .noneMatch(pause -> pause.contains(topic));
  }

  private static int calls(String topic, String orderNo) {
    AtomicInteger count = calls.get(topic + "#" + orderNo);
    return count == null ? 0 : count.get();
  }

  static void onRecord(String topic, ConsumerRecord<String, String> record, Acknowledgment ack) {
    calls.computeIfAbsent(topic + "#" + record.value(), k -> new AtomicInteger()).incrementAndGet();
    if (record.value().equals("2")) {
      throw new IllegalStateException("order 2 is refused");
    }
    ack.acknowledge();
  }

  static DefaultErrorHandler givingUpAtOnce() {
    return givingUpAfter(0);
  }

  static DefaultErrorHandler givingUpAfter(long retries) {
    return new DefaultErrorHandler(
        (record, e) -> givenUp.add(record.topic() + "@" + record.offset()),
        new FixedBackOff(0, retries));
  }

  static DefaultErrorHandler notSeeking(DefaultErrorHandler handler) {
    handler.setSeekAfterError(false);
    return handler;
  }

  static class Listeners {
    @Idempotent(bizType = "aalfn", header = "order-no")
    @KafkaListener(
        id = NOT_SEEKING,
        topics = NOT_SEEKING,
        autoStartup = "false",
        containerFactory = "notSeekingFactory")
    public void onNotSeeking(ConsumerRecord<String, String> record, Acknowledgment ack) {
      onRecord(NOT_SEEKING, record, ack);
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> notSeekingFactory(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory) {
      // One retry first: the failed record comes again with those after it before it is given up.
      return asyncAcks(configurer, consumerFactory, notSeeking(givingUpAfter(1)));
    }

    private static ConcurrentKafkaListenerContainerFactory<Object, Object> asyncAcks(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory,
        DefaultErrorHandler errorHandler) {
      ConcurrentKafkaListenerContainerFactory<Object, Object> factory =
          new ConcurrentKafkaListenerContainerFactory<>();
      configurer.configure(factory, consumerFactory);
      factory.getContainerProperties().setAckMode(ContainerProperties.AckMode.MANUAL);
      factory.getContainerProperties().setAsyncAcks(true);
      factory.setCommonErrorHandler(errorHandler);
      return factory;
    }

    @Bean
    ApplicationListener<ConsumerPausedEvent> consumerPauses() {
      return event -> consumerPauses.add(event.toString());
    }

    @Bean
    Listeners listeners() {
      return new Listeners();
    }
  }
}
