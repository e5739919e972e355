package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TestDatabase;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.sql.Connection;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
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
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * An operator locks the dedup table ({@code LOCK TABLE ... IN ACCESS EXCLUSIVE MODE}, as a
 * migration or a {@code VACUUM FULL} does) for longer than the store's statement timeout, while
 * records arrive. The application sets none of consumer-dedup's store or hold properties: its
 * claims wait on the lock until the store's statement watchdog has the server cancel them at the
 * default statement timeout (5 s, short enough to run here), the store gives up on the call, and
 * the record is held, not skipped nor dead-lettered. Once the lock goes, every record is applied
 * once. The application has the usual dead-letter error handler, so that a record given up would
 * show as a dead letter.
 */
@SpringBootTest(classes = DedupTableLockedPastStatementTimeoutTest.App.class)
@DirtiesContext
class DedupTableLockedPastStatementTimeoutTest {
  static final String TOPIC = "locked-orders";
  static final String BIZ_TYPE = "locked";

  static String schema;

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    schema = SpringTestEnvironment.prepare(registry, "spring_locked", TOPIC, TOPIC + "-dlt");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;
  @Autowired MeterRegistry meters;

  /** The store's retries and the holds of records: what an operator reads during the lock. */
  private final ListAppender<ILoggingEvent> warnings = new ListAppender<>();

  private final List<Logger> warningLogs =
      List.of(
          (Logger) LoggerFactory.getLogger(JdbcDedupStore.class),
          (Logger) LoggerFactory.getLogger(RetryLaterErrorHandler.class));

  @BeforeEach
  void captureWarnings() {
    warnings.start();
    warningLogs.forEach(log -> log.addAppender(warnings));
  }

  @AfterEach
  void stopCapturing() {
    warningLogs.forEach(log -> log.detachAppender(warnings));
  }

  @Test
  void recordsArrivingWhileTheDedupTableIsLockedPastTheStatementTimeoutAreAppliedOnceAfterwards()
      throws Exception {
    // Applied before the lock: its repeat during the lock is a duplicate.
    send("charge 1", "LOCKED-0");
    await().atMost(Duration.ofSeconds(30)).until(() -> effects("LOCKED-0") == 1);
    // Its SUCCESS mark, written in the background, is not left to wait on the lock.
    await()
        .atMost(Duration.ofSeconds(15))
        .until(
            () ->
                store.find(DedupKey.of(BIZ_TYPE, "LOCKED-0")).map(DedupRecord::status).orElse(null)
                    == DedupStatus.SUCCESS);

    List<String> keys = List.of("LOCKED-1", "LOCKED-2", "LOCKED-3", "LOCKED-4", "LOCKED-5");
    long last;
    try (Connection operator = TestDatabase.connect(schema);
        Statement statement = operator.createStatement()) {
      operator.setAutoCommit(false);
      statement.execute(
          "LOCK TABLE " + JdbcDedupStore.DEFAULT_TABLE_NAME + " IN ACCESS EXCLUSIVE MODE");
      long lockedAt = System.currentTimeMillis();
      for (String key : keys) {
        send("charge " + key, key);
      }
      send("charge again", "LOCKED-2");
      last = send("charge 1 again", "LOCKED-0");

      // The fault is real: a claim of the application waits on the operator's lock ...
      await()
          .atMost(Duration.ofSeconds(20))
          .alias("a claim waiting on the lock")
          .until(() -> claimsWaitingOnTheLock() > 0);
      // ... until it is cancelled (pgjdbc's cancel request, not the server's statement_timeout)
      // at the statement timeout, and tried again.
      await()
          .atMost(Duration.ofSeconds(30))
          .alias("the WARN of a claim cancelled and tried again")
          .until(() -> !warnings("Transient database error on").isEmpty());
      ILoggingEvent cancelled = warnings("Transient database error on").get(0);
      assertThat(cancelled.getFormattedMessage())
          .contains("canceling statement due to user request");
      assertThat(cancelled.getTimeStamp() - lockedAt)
          .as("ms from the lock to the cancel")
          .isGreaterThanOrEqualTo(JdbcDedupStore.DEFAULT_STATEMENT_TIMEOUT.toMillis());
      // The store gives up on a call once its retries outlast 10 s: the poll's claim of all its
      // keys first (quietly: each record is then claimed alone), then the first record's claim,
      // about 20 s into the lock. The record is held, not skipped: the WARN an operator reads,
      // and the store_failed outcome counted.
      await()
          .atMost(Duration.ofSeconds(45))
          .alias("the WARN of a record held as the store failed")
          .until(() -> !warnings("Dedup store unavailable for").isEmpty());
      assertThat(SpringTestEnvironment.outcomes(meters, BIZ_TYPE, "store_failed")).isPositive();
      for (String key : keys) {
        assertThat(effects(key)).as("%s applied during the lock", key).isZero();
      }
      operator.rollback();
    }

    await()
        .atMost(Duration.ofSeconds(30))
        .until(() -> keys.stream().allMatch(key -> effects(key) > 0));
    long end = last + 1;
    await()
        .atMost(Duration.ofSeconds(15))
        .until(() -> SpringTestEnvironment.committed(TOPIC, TOPIC, 0) == end);
    for (String key : keys) {
      assertThat(effects(key)).as("times %s was applied", key).isEqualTo(1);
    }
    assertThat(effects("LOCKED-0")).as("times LOCKED-0 was applied").isEqualTo(1);
    assertThat(SpringTestEnvironment.readWritten(TOPIC + "-dlt", "read_uncommitted"))
        .as("dead letters")
        .isEmpty();
  }

  /**
   * The application's claims that wait for a lock on the dedup table of this schema: a claim of one
   * key reads the key's record first (the text of the store's find), then runs the claim statement
   * ({@code WITH r}, or {@code WITH m} when it marks earlier records SUCCESS as well).
   */
  private int claimsWaitingOnTheLock() {
    Integer count =
        jdbc.queryForObject(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
                + " WHERE l.relation = to_regclass(?) AND NOT l.granted"
                + " AND a.wait_event_type = 'Lock' AND (a.query LIKE 'SELECT c.biz_type, %'"
                + " OR a.query LIKE 'WITH r AS (%' OR a.query LIKE 'WITH m AS (%')",
            Integer.class, schema + "." + JdbcDedupStore.DEFAULT_TABLE_NAME);
    return count == null ? 0 : count;
  }

  private List<ILoggingEvent> warnings(String start) {
    return warnings.list.stream()
        .filter(event -> event.getLevel() == Level.WARN)
        .filter(event -> event.getFormattedMessage().startsWith(start))
        .toList();
  }

  private long send(String value, String orderNo) throws Exception {
    return SpringTestEnvironment.send(template, TOPIC, value, "order-no", orderNo);
  }

  private int effects(String orderNo) {
    return SpringTestEnvironment.effects(jdbc, TOPIC, orderNo);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    SimpleMeterRegistry meterRegistry() {
      return new SimpleMeterRegistry();
    }

    @Bean
    DefaultErrorHandler deadLettering(KafkaTemplate<String, String> template) {
      return SpringTestEnvironment.deadLettering(template, 0, 2);
    }

    @Bean
    Listener listener(JdbcTemplate jdbc) {
      return new Listener(jdbc);
    }
  }

  static class Listener {
    final JdbcTemplate jdbc;

    Listener(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = BIZ_TYPE, header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    public void charge(ConsumerRecord<String, String> record) {
      SpringTestEnvironment.effect(
          jdbc, record.topic(), SpringTestEnvironment.header(record, "order-no"), record.value());
    }
  }
}
