package io.consumerdedup.spring.autoconfigure;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import io.consumerdedup.kafka.DedupShareLoop;
import io.consumerdedup.spring.Idempotent;
import io.consumerdedup.spring.IdempotentExecutors;
import io.consumerdedup.spring.ShareListenerTests;
import io.consumerdedup.testing.TestKafka;
import io.consumerdedup.testing.TestShareGroups;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.slf4j.LoggerFactory;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.config.ShareKafkaListenerContainerFactory;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A share container that still delivers once the application's executors closed, as one does when
 * its stop outlasts the shutdown phase's timeout and the context goes on to destroy its beans. The
 * executors built a new executor for the listener's next call, which claimed, ran the listener and
 * had the record accepted by machinery nobody closes (its outcome writer and lease renewer threads
 * outlived the application, on a DataSource about to close). Now the call is refused as after an
 * executor's close ({@code RETRY_LATER}): the record is kept acquired, not run, and released when
 * the consumer closes, for another consumer to apply. Spring Boot 4.0 refuses share listeners, so
 * the boot40 module leaves this class out.
 */
@SpringBootTest(classes = ShareListenerAfterExecutorsClosedTest.App.class)
@DirtiesContext
class ShareListenerAfterExecutorsClosedTest {
  static final String TOPIC = "share-after-close";
  static final Duration WAIT = Duration.ofSeconds(60);

  static final AtomicInteger calls = new AtomicInteger();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    ShareListenerTests.prepare(registry, "spring_share_after_close", 4, TOPIC, TOPIC + "-dlt");
    TestShareGroups.configure(TOPIC, Duration.ofSeconds(5));
  }

  @Autowired KafkaListenerEndpointRegistry registry;
  @Autowired IdempotentExecutors executors;

  private final ListAppender<ILoggingEvent> workerLog = new ListAppender<>();
  private final Logger workerLogger = (Logger) LoggerFactory.getLogger(DedupShareLoop.class);

  @AfterEach
  void detachLog() {
    workerLogger.detachAppender(workerLog);
  }

  @Test
  void aRecordDeliveredAfterTheExecutorsClosedIsNotRunButReleased() throws Exception {
    MessageListenerContainer container = registry.getListenerContainer(TOPIC);
    await().atMost(WAIT).until(() -> TestShareGroups.members(TOPIC) == 1);
    workerLog.start();
    workerLogger.addAppender(workerLog);

    executors.close(); // what the context's destroy does after the shutdown phase timed out
    try (KafkaProducer<String, String> producer = TestKafka.producer()) {
      ProducerRecord<String, String> record = new ProducerRecord<>(TOPIC, "charge 5.00");
      record.headers().add("order-no", "L-1".getBytes(StandardCharsets.UTF_8));
      producer.send(record).get();
    }
    await()
        .atMost(WAIT)
        .alias("the container delivered the record to the listener's worker, which held it")
        .until(
            () ->
                calls.get() > 0
                    || workerLog.list.stream()
                        .anyMatch(e -> e.getFormattedMessage().contains("cannot be handled yet")));
    container.stop();
    await().atMost(WAIT).until(() -> !container.isRunning());

    assertThat(calls).as("listener calls once the executors closed").hasValue(0);
    List<ConsumerRecord<String, String>> left =
        TestShareGroups.remaining(TOPIC, TOPIC, Duration.ofSeconds(5));
    // Acquired again and again within the window, each time released.
    assertThat(left)
        .as("released for another consumer, not accepted")
        .isNotEmpty()
        .extracting(ConsumerRecord::value)
        .containsOnly("charge 5.00");
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    ShareKafkaListenerContainerFactory<String, String> shareFactory() {
      return ShareListenerTests.groupShareFactory(TOPIC);
    }

    @Bean
    Listener listener() {
      return new Listener();
    }
  }

  static class Listener {
    @Idempotent(bizType = "after-close", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, groupId = TOPIC, containerFactory = "shareFactory")
    public void charge(ConsumerRecord<String, String> record) {
      calls.incrementAndGet();
    }
  }
}
