package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.testing.TestShareGroups;
import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
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
 * An application with two {@code @Idempotent} share listeners (two containers) stops while each
 * runs a handler longer than the close timeout. spring-kafka stops the containers one after the
 * other, each waiting for its consumers to close, and each consumer's close waited for its own
 * handler: the stop took the sum of the close timeouts (one minute with two listeners and the
 * default 30 s, past the usual 30 s a platform gives a stopping process), and a container not
 * stopped yet kept handing its worker new records. Spring Boot 4.0 refuses share listeners, so the
 * boot40 module leaves this class out.
 */
@SpringBootTest(classes = ShareListenerStopTogetherTest.App.class)
@DirtiesContext
class ShareListenerStopTogetherTest {
  static final String FIRST = "share-stop-together-a";
  static final String SECOND = "share-stop-together-b";

  static final Duration CLOSE_TIMEOUT = Duration.ofSeconds(4);

  /**
   * Outlasts the stop, so that each record is still its consumer's when the close gives it back.
   */
  static final Duration LOCK = Duration.ofSeconds(15);

  static final CountDownLatch started = new CountDownLatch(2);
  static final CountDownLatch mayFinish = new CountDownLatch(1);

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_share_stop_together", FIRST, SECOND);
    registry.add("consumer-dedup.share.close-timeout", () -> CLOSE_TIMEOUT.toSeconds() + "s");
    TestShareGroups.configure(FIRST, LOCK);
    TestShareGroups.configure(SECOND, LOCK);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired ConfigurableApplicationContext context;

  /** The handlers in hand finish side by side: the stop takes one close timeout, not two. */
  @Test
  void twoShareListenersStoppingTogetherWaitOneCloseTimeoutNotTheirSum() throws Exception {
    send(template, FIRST, "charge 1.00", "order-no", "A-1");
    send(template, SECOND, "charge 2.00", "order-no", "B-1");
    assertThat(started.await(ShareListenerIntegrationTest.WAIT.toSeconds(), TimeUnit.SECONDS))
        .as("both handlers started")
        .isTrue();

    long begin = System.nanoTime();
    Thread stop = new Thread(context::stop, "stopping the application");
    stop.start();
    try {
      stop.join(CLOSE_TIMEOUT.multipliedBy(4).toMillis());
    } finally {
      mayFinish.countDown();
    }
    Duration took = Duration.ofNanos(System.nanoTime() - begin);
    stop.join(ShareListenerIntegrationTest.WAIT.toMillis());

    assertThat(took)
        .as(
            "[the stop of two share listeners whose handlers outlast the close timeout of %s]",
            CLOSE_TIMEOUT)
        // The sum, two close timeouts, at the least before; a loaded machine's slack after.
        .isLessThan(CLOSE_TIMEOUT.multipliedBy(7).dividedBy(4));
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
    @Idempotent(bizType = "stop-together-a", header = "order-no")
    @KafkaListener(id = FIRST, topics = FIRST, groupId = FIRST, containerFactory = "shareFactory")
    public void first(ConsumerRecord<String, String> record) throws InterruptedException {
      holdPastTheCloseTimeout();
    }

    @Idempotent(bizType = "stop-together-b", header = "order-no")
    @KafkaListener(
        id = SECOND,
        topics = SECOND,
        groupId = SECOND,
        containerFactory = "shareFactory")
    public void second(ConsumerRecord<String, String> record) throws InterruptedException {
      holdPastTheCloseTimeout();
    }

    private static void holdPastTheCloseTimeout() throws InterruptedException {
      started.countDown();
      mayFinish.await(
          CLOSE_TIMEOUT.plus(ShareListenerIntegrationTest.WAIT).toSeconds(), TimeUnit.SECONDS);
    }
  }
}
