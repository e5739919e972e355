package io.consumerdedup.spring;

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
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.slf4j.LoggerFactory;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.transaction.annotation.Transactional;

/**
 * A {@code @Transactional} listener in the default mode SEPARATE, with one pool connection and one
 * consumer thread: the claim commits before the listener's transaction takes the connection, and
 * SUCCESS is written after it gave the connection back, so no call waits for a second connection;
 * and its failure is recorded whatever logging it throws.
 */
@SpringBootTest(
    classes = TransactionalListenerOnePoolConnectionTest.App.class,
    properties = {
      "spring.datasource.hikari.maximum-pool-size=1",
      "spring.datasource.hikari.connection-timeout=2000"
    })
@DirtiesContext
class TransactionalListenerOnePoolConnectionTest {

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_one_conn", "one-connection", "one-conn-fail");
    // prepare() sets a larger pool; this test needs exactly one connection.
    registry.add("spring.datasource.hikari.maximum-pool-size", () -> "1");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry registry;

  @Test
  void eachRecordIsAppliedOnceWithoutWaitingForASecondConnection() throws Exception {
    for (String orderNo : new String[] {"ONE-1", "ONE-2", "ONE-1", "ONE-3"}) {
      SpringTestEnvironment.send(template, "one-connection", "charge", "order-no", orderNo);
    }

    await()
        .atMost(Duration.ofSeconds(20))
        .until(() -> SpringTestEnvironment.effects(jdbc, "one-connection", "ONE-3") == 1);
    for (String orderNo : new String[] {"ONE-1", "ONE-2", "ONE-3"}) {
      assertThat(SpringTestEnvironment.effects(jdbc, "one-connection", orderNo))
          .as(orderNo)
          .isEqualTo(1);
      // SEPARATE mode: the SUCCESS mark is written after the listener's transaction commits.
      await()
          .atMost(Duration.ofSeconds(10))
          .untilAsserted(
              () ->
                  assertThat(store.find(DedupKey.of("booking", orderNo)).orElseThrow().status())
                      .as(orderNo)
                      .isEqualTo(DedupStatus.SUCCESS));
    }
  }

  /**
   * The line of the listener's failed attempt throws an Error out of a log appender (a
   * StackOverflowError, as an appender formatting a deep object graph meets): the attempt is still
   * recorded FAILED, and the redelivery, once the stopped container is started again, runs the
   * listener again. Logged first, the failure was never written: the claim stayed PROCESSING under
   * a renewed lease, and every delivery of the record was refused as in progress elsewhere.
   */
  @Test
  void aFailedAttemptWhoseLogLineThrowsAnErrorIsStillRecordedAndRunAgain() throws Exception {
    Logger attemptLog = (Logger) LoggerFactory.getLogger(AttemptLimit.class);
    AtomicBoolean thrown = new AtomicBoolean();
    AppenderBase<ILoggingEvent> overflowing =
        new AppenderBase<>() {
          @Override
          protected void append(ILoggingEvent event) {
            if (event.getFormattedMessage().contains("failing-booking/ERR-1")
                && thrown.compareAndSet(false, true)) {
              throw new StackOverflowError("thrown by a log appender");
            }
          }
        };
    overflowing.start();
    attemptLog.addAppender(overflowing);
    try {
      SpringTestEnvironment.send(template, "one-conn-fail", "charge", "order-no", "ERR-1");
      // spring-kafka stops a container whose thread meets an Error: started again, as after a
      // restart of the application.
      MessageListenerContainer container = registry.getListenerContainer("one-conn-fail");
      await().atMost(Duration.ofSeconds(15)).until(() -> thrown.get() && !container.isRunning());
      container.start();

      await()
          .atMost(Duration.ofSeconds(15))
          .untilAsserted(
              () ->
                  assertThat(SpringTestEnvironment.effects(jdbc, "one-conn-fail", "ERR-1"))
                      .as(
                          "ERR-1 applied at its redelivery (listener runs: %d, its record: %s)",
                          Bookings.failingCalls.get(),
                          store.find(DedupKey.of("failing-booking", "ERR-1")))
                      .isEqualTo(1));
    } finally {
      attemptLog.detachAppender(overflowing);
    }
    assertThat(thrown).as("the appender threw").isTrue();
    assertThat(Bookings.failingCalls.get()).as("listener runs").isEqualTo(2);
    DedupRecord record = store.find(DedupKey.of("failing-booking", "ERR-1")).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(record.attempts()).isEqualTo(2);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Bookings bookings(JdbcTemplate jdbc) {
      return new Bookings(jdbc);
    }
  }

  static class Bookings {
    static final AtomicInteger failingCalls = new AtomicInteger();

    final JdbcTemplate jdbc;

    Bookings(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Transactional
    @Idempotent(bizType = "booking", header = "order-no")
    @KafkaListener(id = "one-connection", topics = "one-connection")
    public void book(ConsumerRecord<String, String> record) {
      SpringTestEnvironment.effect(
          jdbc, "one-connection", SpringTestEnvironment.header(record, "order-no"), record.value());
    }

    /** Fails its first call, inside its transaction, which rolls back. */
    @Transactional
    @Idempotent(bizType = "failing-booking", header = "order-no")
    @KafkaListener(id = "one-conn-fail", topics = "one-conn-fail")
    public void bookOrFail(ConsumerRecord<String, String> record) {
      String key = SpringTestEnvironment.header(record, "order-no");
      SpringTestEnvironment.effect(jdbc, "one-conn-fail", key, record.value());
      if (failingCalls.incrementAndGet() == 1) {
        throw new IllegalStateException("declined at the first call");
      }
    }
  }
}
