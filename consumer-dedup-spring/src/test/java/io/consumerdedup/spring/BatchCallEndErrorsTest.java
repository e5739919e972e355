package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.committed;
import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.readTopic;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.AppenderBase;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.spring.internal.AttemptLimit;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.slf4j.LoggerFactory;
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
import org.springframework.kafka.listener.BatchListenerFailedException;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * An {@code @Idempotent} batch listener's call meets an {@code Error} as it ends, after the method
 * returned or failed: one of the application's offset-commit callback as the held commits are sent,
 * one of a log appender as a failed attempt is logged. The container stops on it; neither may
 * change what is committed or counted. A real PostgreSQL and the in-JVM broker; {@code
 * consumer-dedup.max-attempts=2}.
 */
@SpringBootTest(
    classes = BatchCallEndErrorsTest.App.class,
    properties = "consumer-dedup.max-attempts=2")
@DirtiesContext
class BatchCallEndErrorsTest {
  static final Duration WAIT = Duration.ofSeconds(20);
  static final String COMMITS = "bce-commits";
  static final String LOGGED = "bce-logged";

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry, "spring_batch_call_end", COMMITS, LOGGED, LOGGED + "-dlt");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;

  /**
   * As the batch's held commits are sent, Kafka runs the callback of the first one, which throws an
   * {@code Error}: the container stops. The batch is applied and its outcomes written, so its
   * acknowledgment must be passed on first; dropped, the container stopped with the batch
   * uncommitted past the listener's own commit, and every record came again after the restart.
   */
  @Test
  void anErrorOfAHeldCommitsCallbackStopsTheContainerWithTheBatchAcknowledged() throws Exception {
    send(template, COMMITS, "payload", "order-no", "C-1");
    send(template, COMMITS, "payload", "order-no", "C-2");
    MessageListenerContainer container = containers.getListenerContainer(COMMITS);
    container.start(); // both records in one poll
    await().atMost(WAIT).until(() -> commitCalls.get() >= 1 && !container.isRunning());
    assertThat(store.find(DedupKey.of(COMMITS, "C-2")).map(DedupRecord::status))
        .as("C-2 status")
        .hasValue(DedupStatus.SUCCESS);
    await()
        .atMost(Duration.ofSeconds(5))
        .untilAsserted(
            () ->
                assertThat(committed(COMMITS, COMMITS, 0))
                    .as("[committed offset once the container stopped on the Error, C-2 applied]")
                    .isEqualTo(2L));
    container.start();
    await().atMost(WAIT).until(() -> committed(COMMITS, COMMITS, 0) == 2L);
    assertThat(commitCalls).as("[listener calls]").hasValue(1);
  }

  /**
   * The line of the first failed attempt throws an {@code Error} out of a log appender: the
   * container stops. The attempt must still be counted, so that the record, failing again after the
   * restart on its last attempt (of two), is dead-lettered at once; given back uncounted, it was
   * run a third time first.
   */
  @Test
  void aFailedAttemptWhoseLogLineThrowsAnErrorIsCounted() throws Exception {
    Logger attemptLog = (Logger) LoggerFactory.getLogger(AttemptLimit.class);
    AtomicBoolean thrown = new AtomicBoolean();
    AppenderBase<ILoggingEvent> overflowing =
        new AppenderBase<>() {
          @Override
          protected void append(ILoggingEvent event) {
            if (event.getFormattedMessage().contains(LOGGED + "/L-FAIL")
                && thrown.compareAndSet(false, true)) {
              throw new StackOverflowError("thrown by a log appender");
            }
          }
        };
    overflowing.start();
    attemptLog.addAppender(overflowing);
    try {
      send(template, LOGGED, "payload", "order-no", "L-FAIL");
      MessageListenerContainer container = containers.getListenerContainer(LOGGED);
      container.start();
      await().atMost(WAIT).until(() -> thrown.get() && !container.isRunning());
      container.start(); // as after a restart of the application
      await().atMost(WAIT).until(() -> committed(LOGGED, LOGGED, 0) == 1L);
    } finally {
      attemptLog.detachAppender(overflowing);
    }
    assertThat(readTopic(LOGGED + "-dlt", 1, Duration.ofSeconds(5)))
        .as("dead letters")
        .extracting(record -> header(record, "order-no"))
        .containsExactly("L-FAIL");
    assertThat(loggedCalls).as("[listener calls, max-attempts 2]").hasValue(2);
  }

  static final AtomicInteger commitCalls = new AtomicInteger();
  static final AtomicInteger loggedCalls = new AtomicInteger();

  static class Listeners {
    @Idempotent(bizType = COMMITS, header = "order-no")
    @KafkaListener(
        id = COMMITS,
        topics = COMMITS,
        batch = "true",
        autoStartup = "false",
        containerFactory = "manualFactory")
    public void commits(
        List<ConsumerRecord<String, String>> records, Acknowledgment ack, Consumer<?, ?> consumer) {
      commitCalls.incrementAndGet();
      TopicPartition partition = new TopicPartition(COMMITS, 0);
      ConsumerRecord<String, String> first = records.get(0);
      ConsumerRecord<String, String> last = records.get(records.size() - 1);
      consumer.commitAsync(
          Map.of(partition, new OffsetAndMetadata(first.offset() + 1)),
          (offsets, e) -> {
            throw new StackOverflowError("the application's commit callback");
          });
      // Sent once the outcomes are written, after the first: Kafka runs the first one's callback
      // as this one completes. What was done before the last record: only the acknowledgment
      // passes it.
      consumer.commitSync(Map.of(partition, new OffsetAndMetadata(last.offset())));
      ack.acknowledge();
    }

    @Idempotent(bizType = LOGGED, header = "order-no")
    @KafkaListener(id = LOGGED, topics = LOGGED, batch = "true", autoStartup = "false")
    public void logged(List<ConsumerRecord<String, String>> records) {
      loggedCalls.incrementAndGet();
      throw new BatchListenerFailedException("declined", new IllegalStateException("declined"), 0);
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    /** Three more deliveries, then the dead-letter topic. */
    @Bean
    DefaultErrorHandler errorHandler(KafkaTemplate<Object, Object> template) {
      return SpringTestEnvironment.deadLettering(template, 100, 3);
    }

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
    Listeners listeners() {
      return new Listeners();
    }
  }
}
