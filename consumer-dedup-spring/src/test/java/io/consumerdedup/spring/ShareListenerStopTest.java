package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.testing.TestShareGroups;
import java.time.Duration;
import java.util.List;
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
 * An application stopped while its {@code @Idempotent} share listeners run a record each: each
 * record's acknowledgement, decided as its handler ends, must reach the broker although the
 * containers stop. spring-kafka 4.1 drops the acknowledgements still queued for its consumer's
 * thread when a container stops: a record dead-lettered as the application stopped came back after
 * the restart and was dead-lettered a second time. So was it when a renewal of the record's lock
 * fell due while the application stopped: the renewal stayed queued for the closing consumer's
 * thread, and the record, taken for one out for renewal, was left out of the close. And so was it
 * when the listener threw an {@code Error} that cannot describe itself (its {@code getMessage()}
 * throws): printing it ended the consumer's close before the record's REJECT was added. One
 * listener throws an exception, the other such an {@code Error}, both as the application stops.
 * Spring Boot 4.0 refuses share listeners, so the boot40 module leaves this class out.
 */
@SpringBootTest(
    classes = ShareListenerStopTest.App.class,
    properties = "consumer-dedup.max-attempts=1")
@DirtiesContext
class ShareListenerStopTest {
  static final String DECLINING = "share-stop";
  static final String UNPRINTABLE = "share-stop-error";

  /** How long each handler runs once both started: the application is stopped meanwhile. */
  static final Duration HANDLER = Duration.ofSeconds(3);

  /**
   * The groups' acquisition lock: a renewal falls due every third of it while the application stops
   * and the handlers still run, and a record's lock outlasts its handler.
   */
  static final Duration LOCK = Duration.ofSeconds(6);

  static final CountDownLatch started = new CountDownLatch(2);

  /** One listener's record and what became of its handler. */
  record Case(String topic, String key, AtomicLong endedNanos, AtomicInteger calls) {
    Case(String topic, String key) {
      this(topic, key, new AtomicLong(), new AtomicInteger());
    }
  }

  static final Case declined = new Case(DECLINING, "D-2");
  static final Case unprintable = new Case(UNPRINTABLE, "D-1");

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry,
        "spring_share_stop",
        DECLINING,
        DECLINING + "-dlt",
        UNPRINTABLE,
        UNPRINTABLE + "-dlt");
    TestShareGroups.configure(DECLINING, LOCK, Duration.ofSeconds(1)); // joins in a second
    TestShareGroups.configure(UNPRINTABLE, LOCK, Duration.ofSeconds(1)); // joins in a second
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired ConfigurableApplicationContext context;

  /**
   * The user sees each declined order in the dead-letter topic once, its handler run once, and
   * nothing left in the queue, although the application stopped while the handlers ran and started
   * again: also the order whose listener threw an {@code Error} that cannot be printed.
   */
  @Test
  void aRecordDeadLetteredWhileTheApplicationStopsIsDeadLetteredOnceAlsoOnAnUnprintableError()
      throws Exception {
    List<Case> cases = List.of(declined, unprintable);
    for (Case c : cases) {
      send(template, c.topic(), "charge 5.00", "order-no", c.key());
    }
    assertThat(started.await(ShareListenerIntegrationTest.WAIT.toSeconds(), TimeUnit.SECONDS))
        .as("both handlers started")
        .isTrue();

    long stopNanos = System.nanoTime();
    context.stop();
    for (Case c : cases) {
      assertThat(c.endedNanos().get() - stopNanos)
          .as("the handler of %s was still running when the application began to stop", c.key())
          .isPositive();
    }
    context.start();

    for (Case c : cases) {
      await()
          .atMost(ShareListenerIntegrationTest.WAIT)
          .until(
              () ->
                  TestShareGroups.remaining(c.topic(), c.topic(), Duration.ofSeconds(2)).isEmpty());
    }
    // A copy delivered again after the restart would be dead-lettered again within this window;
    // then every dead letter written is read, at once rather than for a read's whole timeout.
    Thread.sleep(2_000);
    for (Case c : cases) {
      assertThat(SpringTestEnvironment.readWritten(c.topic() + "-dlt", "read_uncommitted"))
          .as("dead letters of %s", c.key())
          .hasSize(1);
      assertThat(c.calls().get()).as("handler runs of %s", c.key()).isEqualTo(1);
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    ShareKafkaListenerContainerFactory<String, String> shareFactory() {
      return ShareListenerTests.stringShareFactory();
    }

    @Bean
    Listeners listeners() {
      return new Listeners();
    }
  }

  static class Listeners {
    @Idempotent(bizType = "stop", header = "order-no")
    @KafkaListener(
        id = DECLINING,
        topics = DECLINING,
        groupId = DECLINING,
        containerFactory = "shareFactory")
    public void charge(ConsumerRecord<String, String> record) throws InterruptedException {
      run(declined);
      throw new IllegalStateException("card declined for " + header(record, "order-no"));
    }

    @Idempotent(bizType = "stop-error", header = "order-no")
    @KafkaListener(
        id = UNPRINTABLE,
        topics = UNPRINTABLE,
        groupId = UNPRINTABLE,
        containerFactory = "shareFactory")
    public void chargeUnprintably(ConsumerRecord<String, String> record)
        throws InterruptedException {
      run(unprintable);
      throw new AssertionError() {
        private static final long serialVersionUID = 1L;

        @Override
        public String getMessage() {
          throw new IllegalStateException(
              "could not print the declined order " + header(record, "order-no"));
        }
      };
    }

    private static void run(Case c) throws InterruptedException {
      c.calls().incrementAndGet();
      started.countDown();
      try {
        // Each handler runs its full time from the later start, so that both still run as the
        // application stops, however far apart the two consumers took their records.
        started.await(ShareListenerIntegrationTest.WAIT.toSeconds(), TimeUnit.SECONDS);
        Thread.sleep(HANDLER.toMillis());
      } finally {
        c.endedNanos().set(System.nanoTime());
      }
    }
  }
}
