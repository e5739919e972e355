package io.consumerdedup.spring;

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
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
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
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.util.backoff.FixedBackOff;

/**
 * An {@code @Idempotent} record listener in ack mode {@code MANUAL} with {@code asyncAcks}, which
 * commits through its {@code Consumer} argument with a callback and acknowledges. Its commits are
 * held until its SUCCESS is settled; as the next record's held commit is sent, Kafka runs the
 * earlier commit's callback, which throws a {@code RuntimeException}. That record is applied and
 * its SUCCESS settled: it must be acknowledged, not failed, which the error handler here hands to
 * its recoverer at once (a dead-letter topic, for a record applied), and spring-kafka then leaves
 * the consumer paused for the records the handler sought back. A callback's {@code Error} stops the
 * container, once the acknowledgment of the applied record is passed on. A real PostgreSQL and the
 * in-JVM broker.
 */
@SpringBootTest(classes = HeldAcknowledgmentCommitCallbackTest.App.class)
@DirtiesContext
class HeldAcknowledgmentCommitCallbackTest {
  static final Duration WAIT = Duration.ofSeconds(15);
  static final String TOPIC = "hacc-orders";
  static final TopicPartition PARTITION = new TopicPartition(TOPIC, 0);
  static final String ERRORS = "hacc-errors";
  static final List<String> consumerPauses = new CopyOnWriteArrayList<>();
  static final List<String> givenUp = new CopyOnWriteArrayList<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "held_ack_callback", TOPIC, ERRORS);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void anAppliedRecordWhoseHeldCommitMeetsAnEarlierCommitsCallbackFailureIsAcknowledgedNotGivenUp()
      throws Exception {
    for (String orderNo : List.of("H-1", "H-2", "H-3", "H-4")) {
      SpringTestEnvironment.send(template, TOPIC, "payload", "order-no", orderNo);
    }
    MessageListenerContainer container = containers.getListenerContainer(TOPIC);
    container.start(); // the four records in one poll
    await()
        .atMost(WAIT)
        .untilAsserted(
            () -> {
              assertThat(givenUp).as("[records handed to the recoverer]").isEmpty();
              assertThat(SpringTestEnvironment.committed(TOPIC, TOPIC, 0))
                  .as("[committed offset, every record acknowledged once applied]")
                  .isEqualTo(4L);
            });
    assertThat(givenUp).as("[records handed to the recoverer]").isEmpty();
    for (String orderNo : List.of("H-1", "H-2", "H-3", "H-4")) {
      assertThat(status(orderNo)).as(orderNo + " status").isEqualTo(DedupStatus.SUCCESS);
    }
    assertThat(consumerPauses).as("[whole-consumer pauses]").isEmpty();
  }

  @Test
  void anErrorOfAnEarlierCommitsCallbackStopsTheContainerWithTheAppliedRecordAcknowledged()
      throws Exception {
    for (String orderNo : List.of("E-1", "E-2", "E-3", "E-4")) {
      SpringTestEnvironment.send(template, ERRORS, "payload", "order-no", orderNo);
    }
    MessageListenerContainer container = containers.getListenerContainer(ERRORS);
    container.start(); // the four records in one poll
    await().atMost(WAIT).until(() -> errorCalls.get() >= 2 && !container.isRunning());
    assertThat(store.find(DedupKey.of("hacce", "E-2")).map(DedupRecord::status))
        .as("E-2 status")
        .hasValue(DedupStatus.SUCCESS);
    await()
        .atMost(Duration.ofSeconds(5))
        .untilAsserted(
            () ->
                assertThat(SpringTestEnvironment.committed(ERRORS, ERRORS, 0))
                    .as("[committed offset once the container stopped on the Error, E-2 applied]")
                    .isEqualTo(2L));
    container.start();
    await()
        .atMost(WAIT)
        .untilAsserted(
            () ->
                assertThat(SpringTestEnvironment.committed(ERRORS, ERRORS, 0))
                    .as("[committed offset after a restart]")
                    .isEqualTo(4L));
    assertThat(errorCalls).as("[listener calls, each record applied once]").hasValue(4);
  }

  private DedupStatus status(String orderNo) {
    return store.find(DedupKey.of("hacc", orderNo)).map(DedupRecord::status).orElse(null);
  }

  static class Listener {
    @Idempotent(bizType = "hacc", header = "order-no")
    @KafkaListener(
        id = TOPIC,
        topics = TOPIC,
        autoStartup = "false",
        containerFactory = "asyncAcksFactory")
    public void onOrder(
        ConsumerRecord<String, String> record, Acknowledgment ack, Consumer<?, ?> consumer) {
      String orderNo =
          new String(record.headers().lastHeader("order-no").value(), StandardCharsets.UTF_8);
      Map<TopicPartition, OffsetAndMetadata> next =
          Map.of(PARTITION, new OffsetAndMetadata(record.offset() + 1));
      if (orderNo.equals("H-1")) {
        consumer.commitAsync(
            next,
            (offsets, e) -> {
              throw new UnsupportedOperationException("the application's commit callback");
            });
      } else if (orderNo.equals("H-2")) {
        // H-1's commit was sent as its call ended: answered now, its callback runs as Kafka sends
        // the next commit, H-2's, once H-2's outcome is settled.
        consumer.committed(Set.of(PARTITION));
        consumer.commitAsync(next, null);
      }
      ack.acknowledge();
    }
  }

  static final AtomicInteger errorCalls = new AtomicInteger();

  static class ErrorListener {
    @Idempotent(bizType = "hacce", header = "order-no")
    @KafkaListener(
        id = ERRORS,
        topics = ERRORS,
        autoStartup = "false",
        containerFactory = "asyncAcksFactory")
    public void onOrder(
        ConsumerRecord<String, String> record, Acknowledgment ack, Consumer<?, ?> consumer) {
      errorCalls.incrementAndGet();
      String orderNo =
          new String(record.headers().lastHeader("order-no").value(), StandardCharsets.UTF_8);
      TopicPartition partition = new TopicPartition(ERRORS, 0);
      if (orderNo.equals("E-1")) {
        consumer.commitAsync(
            Map.of(partition, new OffsetAndMetadata(record.offset() + 1)),
            (offsets, e) -> {
              throw new StackOverflowError("the application's commit callback");
            });
      } else if (orderNo.equals("E-2")) {
        consumer.committed(Set.of(partition)); // as for H-2
        // What was done before it: only its acknowledgment passes it.
        consumer.commitAsync(Map.of(partition, new OffsetAndMetadata(record.offset())), null);
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
      // A failed record goes to the recoverer (a dead-letter topic) at once.
      factory.setCommonErrorHandler(
          new DefaultErrorHandler(
              (record, e) -> givenUp.add(record.topic() + "@" + record.offset()),
              new FixedBackOff(0, 0)));
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

    @Bean
    ErrorListener errorListener() {
      return new ErrorListener();
    }
  }
}
