package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.readWritten;
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
 * An application stopped while its {@code @Idempotent} share listener runs a record for longer than
 * the record's acquisition lock. While the container stops, its consumer's thread waits in the
 * consumer's close for the handler in hand, and nobody polled the consumer: the lock renewals made
 * meanwhile were never sent, the lock ran out, the close's acknowledgement was refused, and after
 * the restart the record came again and was dead-lettered a second time. Spring Boot 4.0 refuses
 * share listeners, so the boot40 module leaves this class out.
 */
@SpringBootTest(
    classes = ShareListenerStopPastLockTest.App.class,
    properties = {
      "consumer-dedup.max-attempts=1",
      "consumer-dedup.share.close-timeout=15s",
    })
@DirtiesContext
class ShareListenerStopPastLockTest {
  static final String TOPIC = "share-stop-past-lock";

  /** The group's acquisition lock: the handler outlasts it several times while the stop waits. */
  static final Duration LOCK = Duration.ofSeconds(2);

  /** How long the handler runs: the application is stopped as it starts. */
  static final Duration HANDLER = Duration.ofSeconds(5);

  static final CountDownLatch started = new CountDownLatch(1);
  static final AtomicLong endedNanos = new AtomicLong();
  static final AtomicInteger calls = new AtomicInteger();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_share_stop_past_lock", TOPIC, TOPIC + "-dlt");
    TestShareGroups.configure(TOPIC, LOCK, Duration.ofSeconds(1)); // joins in a second
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired ConfigurableApplicationContext context;

  /**
   * The user sees the declined order in the dead-letter topic once and its handler run once,
   * although the application stopped while the handler ran past the record's lock and started
   * again.
   */
  @Test
  void aRecordWhoseHandlerOutlastsItsLockWhileTheApplicationStopsIsDeadLetteredOnce()
      throws Exception {
    send(template, TOPIC, "charge 5.00", "order-no", "D-1");
    assertThat(started.await(ShareListenerIntegrationTest.WAIT.toSeconds(), TimeUnit.SECONDS))
        .as("the handler started")
        .isTrue();

    long stopNanos = System.nanoTime();
    context.stop();
    assertThat(endedNanos.get() - stopNanos)
        .as("how long the handler ran on after the application began to stop, in ns")
        .isGreaterThan(LOCK.toNanos());
    context.start();

    // No record of the group left to deliver: the record's reject reached the broker, either with
    // the stopping consumer's close, or (as it was) after a second dead letter, once a consumer of
    // the restarted application had the record again. Every dead letter is written by then.
    await()
        .atMost(ShareListenerIntegrationTest.WAIT)
        .until(() -> TestShareGroups.lag(TOPIC, TOPIC) == 0);
    assertThat(readWritten(TOPIC + "-dlt", "read_committed")).as("dead letters of D-1").hasSize(1);
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
    @Idempotent(bizType = "stop-past-lock", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, groupId = TOPIC, containerFactory = "shareFactory")
    public void charge(ConsumerRecord<String, String> record) throws InterruptedException {
      calls.incrementAndGet();
      started.countDown();
      try {
        Thread.sleep(HANDLER.toMillis());
      } finally {
        endedNanos.set(System.nanoTime());
      }
      throw new IllegalStateException("card declined for " + header(record, "order-no"));
    }
  }
}
