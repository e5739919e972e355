package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.readTopic;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.testing.TestShareGroups;
import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ShareKafkaListenerContainerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * As {@link ShareListenerStopTest}, the listener throwing an {@code Error} that cannot describe
 * itself (its {@code getMessage()} throws) as the application stops: the record's dead letter and
 * REJECT, decided as the handler ends, must still reach the broker with the consumer's close.
 */
@SpringBootTest(
    classes = ShareListenerStopErrorTest.App.class,
    properties = "consumer-dedup.max-attempts=1")
@DirtiesContext
class ShareListenerStopErrorTest {
  static final String TOPIC = "share-stop-error";

  /** How long the handler runs: the application is stopped meanwhile. */
  static final Duration HANDLER = Duration.ofSeconds(3);

  /**
   * The group's acquisition lock: a renewal falls due a third of it after the record arrived, while
   * the application stops and the handler still runs, and the record's lock outlasts the handler.
   */
  static final Duration LOCK = Duration.ofSeconds(6);

  static final CountDownLatch started = new CountDownLatch(1);
  static final AtomicLong endedNanos = new AtomicLong();
  static final AtomicInteger calls = new AtomicInteger();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_share_stop_error", TOPIC, TOPIC + "-dlt");
    TestShareGroups.configure(TOPIC, LOCK);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired ConfigurableApplicationContext context;

  /**
   * The user sees the declined order in the dead-letter topic once, its handler run once, and
   * nothing left in the queue, although the application stopped while the handler ran and started
   * again.
   */
  @Test
  void aRecordWhoseListenerThrowsAnUnprintableErrorAsTheApplicationStopsIsDeadLetteredOnce()
      throws Exception {
    send(template, TOPIC, "charge 5.00", "order-no", "D-1");
    assertThat(started.await(ShareListenerIntegrationTest.WAIT.toSeconds(), TimeUnit.SECONDS))
        .as("the handler started")
        .isTrue();

    long stopNanos = System.nanoTime();
    context.stop();
    assertThat(endedNanos.get() - stopNanos)
        .as("the handler was still running when the application began to stop")
        .isPositive();
    context.start();

    await()
        .atMost(ShareListenerIntegrationTest.WAIT)
        .until(() -> TestShareGroups.remaining(TOPIC, TOPIC, Duration.ofSeconds(2)).isEmpty());
    // A copy delivered again after the restart would be dead-lettered again within this window.
    Thread.sleep(2_000);
    assertThat(readTopic(TOPIC + "-dlt", 2, Duration.ofSeconds(5)))
        .as("dead letters of D-1")
        .hasSize(1);
    assertThat(calls.get()).as("handler runs").isEqualTo(1);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    ShareKafkaListenerContainerFactory<String, String> shareFactory() {
      return ShareListenerTests.stringShareFactory();
    }

    @Bean
    Listener listener() {
      return new Listener();
    }
  }

  static class Listener {
    @Idempotent(bizType = "stop-error", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, groupId = TOPIC, containerFactory = "shareFactory")
    public void charge(ConsumerRecord<String, String> record) throws InterruptedException {
      calls.incrementAndGet();
      started.countDown();
      try {
        Thread.sleep(HANDLER.toMillis());
      } finally {
        endedNanos.set(System.nanoTime());
      }
      throw new AssertionError() {
        private static final long serialVersionUID = 1L;

        @Override
        public String getMessage() {
          throw new IllegalStateException(
              "could not print the declined order " + header(record, "order-no"));
        }
      };
    }
  }
}
