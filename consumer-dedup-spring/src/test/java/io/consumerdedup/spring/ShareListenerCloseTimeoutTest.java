package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import io.consumerdedup.kafka.DedupShareLoop;
import io.consumerdedup.testing.TestShareGroups;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
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
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A share container stops while its {@code @Idempotent} listener runs a record past the close
 * timeout (30 s): the consumer closes without the handler, and its record is given back to the
 * broker. The stop took the whole 30 s and the record came again, and the log did not say why,
 * where {@code DedupShareLoop} names the record. Spring Boot 4.0 refuses share listeners, so the
 * boot40 module leaves this class out.
 */
@SpringBootTest(classes = ShareListenerCloseTimeoutTest.App.class)
@DirtiesContext
class ShareListenerCloseTimeoutTest {
  static final String TOPIC = "share-close-timeout";

  /** The close timeout of a share listener's stop, set by {@code consumer-dedup.share.*}. */
  static final Duration CLOSE_TIMEOUT = Duration.ofSeconds(3);

  /**
   * The group's acquisition lock (the broker's minimum): outlasts the close timeout, so that the
   * record is still this consumer's when its close gives it back.
   */
  static final Duration LOCK = Duration.ofSeconds(15);

  static final CountDownLatch started = new CountDownLatch(1);
  static final CountDownLatch mayFinish = new CountDownLatch(1);

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_share_close_timeout", TOPIC);
    registry.add("consumer-dedup.share.close-timeout", () -> CLOSE_TIMEOUT.toSeconds() + "s");
    TestShareGroups.configure(TOPIC, LOCK, Duration.ofSeconds(1)); // joins in a second
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired KafkaListenerEndpointRegistry registry;

  // The worker's messages go to the share loop's logger, whichever owns the worker.
  private final ListAppender<ILoggingEvent> loopLog = new ListAppender<>();
  private final Logger loopLogger = (Logger) LoggerFactory.getLogger(DedupShareLoop.class);

  @BeforeEach
  void captureTheLoopsLog() {
    loopLog.start();
    loopLogger.addAppender(loopLog);
  }

  @AfterEach
  void releaseTheLog() {
    loopLogger.detachAppender(loopLog);
  }

  /**
   * The user sees a WARN naming the record whose handler outlasted the close timeout, its group,
   * the timeout, and that the record is given back.
   */
  @Test
  void aHandlerThatOutlastsTheCloseTimeoutIsNamedInAWarning() throws Exception {
    send(template, TOPIC, "charge 9.00", "order-no", "T-1");
    assertThat(started.await(ShareListenerIntegrationTest.WAIT.toSeconds(), TimeUnit.SECONDS))
        .as("the handler started")
        .isTrue();

    Thread stop = new Thread(registry.getListenerContainer(TOPIC)::stop, "stopping " + TOPIC);
    stop.start();
    try {
      await()
          .atMost(CLOSE_TIMEOUT.plus(ShareListenerIntegrationTest.WAIT))
          .untilAsserted(
              () ->
                  assertThat(warnings())
                      .as(
                          "[the log says which record's handler outlasted the close timeout, and"
                              + " what of it] WARNs")
                      .anySatisfy(
                          message ->
                              assertThat(message)
                                  .contains(TOPIC + "-0@0")
                                  .contains(TOPIC)
                                  .contains(CLOSE_TIMEOUT.toString())
                                  .contains("given back")));
    } finally {
      mayFinish.countDown();
      stop.join(ShareListenerIntegrationTest.WAIT.toMillis());
    }
  }

  private List<String> warnings() {
    List<ILoggingEvent> events;
    synchronized (loopLog) { // the lock under which the appender appends
      events = List.copyOf(loopLog.list);
    }
    return events.stream()
        .filter(event -> event.getLevel() == Level.WARN)
        .map(ILoggingEvent::getFormattedMessage)
        .toList();
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
    @Idempotent(bizType = "close-timeout", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, groupId = TOPIC, containerFactory = "shareFactory")
    public void charge(ConsumerRecord<String, String> record) throws InterruptedException {
      started.countDown();
      // Held until the test has seen the stop out: past the close timeout.
      mayFinish.await(
          CLOSE_TIMEOUT.plus(ShareListenerIntegrationTest.WAIT).toSeconds(), TimeUnit.SECONDS);
    }
  }
}
