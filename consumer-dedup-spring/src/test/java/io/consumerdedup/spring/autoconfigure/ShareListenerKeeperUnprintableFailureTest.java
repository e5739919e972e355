package io.consumerdedup.spring.autoconfigure;

import static io.consumerdedup.spring.ShareListenerTests.apply;
import static io.consumerdedup.spring.ShareListenerTests.awaitAppliedOnceAndAccepted;
import static io.consumerdedup.spring.ShareListenerTests.orderNo;
import static io.consumerdedup.spring.ShareListenerTests.sendOrder;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.spring.Idempotent;
import io.consumerdedup.spring.ShareListenerTests;
import io.consumerdedup.testing.TestKafka;
import io.consumerdedup.testing.TestShareGroups;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.config.ShareKafkaListenerContainerFactory;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * The keeper of a share listener's consumer is the only thread that renews and acknowledges that
 * consumer's records. When a renewal or an acknowledgement throws, the keeper logs the throwable
 * and goes on; a throwable whose printing throws in turn (an {@code Error} built around an entity
 * it cannot read, or a second {@code OutOfMemoryError} as the line is written) made the log call
 * throw, and the second log call, in the keeper's last catch, threw out of its thread: the keeper
 * ended, its consumer's records were never acknowledged, and the consumer, which polls only once
 * every record of its last poll is acknowledged, received nothing more. Package-private hooks make
 * the renewal and the acknowledgement throw. Spring Boot 4.0 refuses share listeners, so the boot40
 * module leaves this class out.
 */
@SpringBootTest(classes = ShareListenerKeeperUnprintableFailureTest.App.class)
@DirtiesContext
class ShareListenerKeeperUnprintableFailureTest {
  static final String RENEWED = "share-keeper-unprintable-renewed";
  static final String ACKNOWLEDGED = "share-keeper-unprintable-acknowledged";
  static final Duration LOCK = Duration.ofSeconds(3);
  static final Duration WAIT = Duration.ofSeconds(20);

  /** Handler calls that returned, by order number. */
  static final Map<String, AtomicInteger> applied = new ConcurrentHashMap<>();

  /** Counted down once the renewal of N-1's lock threw. */
  static final CountDownLatch renewalFailed = new CountDownLatch(1);

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    TestKafka.createTopics(1, ACKNOWLEDGED, ACKNOWLEDGED + "-dlt");
    ShareListenerTests.prepare(
        registry, "spring_share_keeper_unprintable", 4, RENEWED, RENEWED + "-dlt");
    for (String group : List.of(RENEWED, ACKNOWLEDGED)) {
      TestShareGroups.configure(group, LOCK);
    }
  }

  @Autowired KafkaListenerEndpointRegistry registry;

  /**
   * An {@code Error} whose {@code getMessage()} throws another of its kind: each attempt to print
   * one throws a new one, as a second {@code OutOfMemoryError} does when the first is logged.
   */
  static final class UnprintableError extends Error {
    private static final long serialVersionUID = 1L;

    @Override
    public String getMessage() {
      throw new UnprintableError();
    }
  }

  /**
   * The renewal of N-1's lock throws such an {@code Error} once, while its handler runs: the user
   * sees N-1 accepted and N-2, sent after it, applied. Before the fix the keeper's thread ended on
   * the log line, N-1 was never acknowledged, and N-2 never reached the listener.
   */
  @Test
  void aRenewalFailingWithAnUnprintableErrorLeavesTheKeeperRenewingAndTheConsumerGoesOn()
      throws Exception {
    listener(RENEWED).beforeAcknowledge =
        record -> {
          if ("N-1".equals(orderNo(record)) && renewalFailed.getCount() > 0) {
            renewalFailed.countDown();
            throw new UnprintableError();
          }
        };

    sendOrder(RENEWED, "N-1");
    assertThat(renewalFailed.await(WAIT.toSeconds(), TimeUnit.SECONDS))
        .as("the renewal of N-1 threw")
        .isTrue();
    sendOrder(RENEWED, "N-2");
    awaitAppliedOnceAndAccepted(applied, WAIT, RENEWED, "N-1", "N-2");
  }

  /**
   * The acknowledgement of A-1, whose listener returned, throws such an {@code Error} once: the
   * user sees A-1 accepted and A-2, sent after it, applied. Before the fix the keeper's thread
   * ended the same way.
   */
  @Test
  void anAcknowledgementFailingWithAnUnprintableErrorIsSentAgainAndTheConsumerGoesOn()
      throws Exception {
    AtomicBoolean failed = new AtomicBoolean();
    listener(ACKNOWLEDGED).beforeAcknowledge =
        record -> {
          if ("A-1".equals(orderNo(record)) && failed.compareAndSet(false, true)) {
            throw new UnprintableError();
          }
        };

    sendOrder(ACKNOWLEDGED, "A-1");
    await()
        .atMost(WAIT)
        .dontCatchUncaughtExceptions()
        .alias("the acknowledgement of A-1 threw")
        .until(failed::get);
    sendOrder(ACKNOWLEDGED, "A-2");
    awaitAppliedOnceAndAccepted(applied, WAIT, ACKNOWLEDGED, "A-1", "A-2");
  }

  private DedupShareListener<?, ?> listener(String listenerId) {
    return (DedupShareListener<?, ?>)
        registry.getListenerContainer(listenerId).getContainerProperties().getMessageListener();
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    ShareKafkaListenerContainerFactory<String, String> shareFactory() {
      return ShareListenerTests.groupShareFactory(RENEWED);
    }

    @Bean
    Listeners listeners() {
      return new Listeners();
    }
  }

  static class Listeners {
    @Idempotent(bizType = "keeper-unprintable-renewed", header = "order-no")
    @KafkaListener(
        id = RENEWED,
        topics = RENEWED,
        groupId = RENEWED,
        containerFactory = "shareFactory")
    public void renewed(ConsumerRecord<String, String> record) throws InterruptedException {
      if ("N-1".equals(orderNo(record))) {
        // Runs until a renewal of its lock has been tried, and failed.
        renewalFailed.await(WAIT.toSeconds(), TimeUnit.SECONDS);
      }
      apply(applied, record);
    }

    @Idempotent(bizType = "keeper-unprintable-acknowledged", header = "order-no")
    @KafkaListener(
        id = ACKNOWLEDGED,
        topics = ACKNOWLEDGED,
        groupId = ACKNOWLEDGED,
        containerFactory = "shareFactory")
    public void acknowledged(ConsumerRecord<String, String> record) {
      apply(applied, record);
    }
  }
}
