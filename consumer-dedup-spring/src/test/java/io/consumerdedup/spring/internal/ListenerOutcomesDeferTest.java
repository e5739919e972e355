package io.consumerdedup.spring.internal;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.AppenderBase;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TestDatabase;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.slf4j.LoggerFactory;

/**
 * A record's claim is left to the container while the claim of an earlier record, whose end the
 * container never reported, is still open on the thread, and settling that earlier claim throws an
 * {@code Error} (its failed attempt's log line meets an appender's {@code StackOverflowError}). On
 * PostgreSQL.
 */
class ListenerOutcomesDeferTest {
  private static final DedupKey ABANDONED = DedupKey.of("payment", "A-1");
  private static final DedupKey CURRENT = DedupKey.of("payment", "C-1");

  private String schema;
  private HikariDataSource pool;
  private JdbcDedupStore store;
  private IdempotentExecutor executor;

  @BeforeEach
  void setUp() {
    schema = TestDatabase.newSchema("outcomes_defer");
    pool = TestDatabase.dataSource(schema, 4);
    store = JdbcDedupStore.builder(pool).build();
    executor = IdempotentExecutor.builder(store).build();
  }

  @AfterEach
  void tearDown() {
    ListenerOutcomes.abandon();
    executor.close();
    pool.close();
    TestDatabase.dropSchema(schema);
  }

  /**
   * The new claim is still settled when the container reports its record's end. Recorded after the
   * earlier claim was settled, it was never recorded: left open under a lease renewed for as long
   * as the process lived, every delivery of its key refused as in progress elsewhere.
   */
  @Test
  void anErrorSettlingAnAbandonedClaimDoesNotLeaveTheNextRecordsClaimOpen() {
    ConsumerRecord<String, String> abandoned = new ConsumerRecord<>("payments", 0, 7, "k", "A-1");
    ConsumerRecord<String, String> current = new ConsumerRecord<>("payments", 0, 8, "k", "C-1");
    AttemptLimit attempts = new AttemptLimit(3);
    // Its listener never returned (an Error the container met), and the container moved on.
    ListenerOutcomes.deferToContainer(
        ListenerOutcomes.pending(
            abandoned, executor.claim(ABANDONED, null, "payments-0@7"), attempts));
    ListenerOutcomes.Pending next =
        ListenerOutcomes.pending(current, executor.claim(CURRENT, null, "payments-0@8"), attempts);

    Logger attemptLog = (Logger) LoggerFactory.getLogger(AttemptLimit.class);
    AppenderBase<ILoggingEvent> overflowing =
        new AppenderBase<>() {
          @Override
          protected void append(ILoggingEvent event) {
            if (event.getFormattedMessage().contains("A-1")) {
              throw new StackOverflowError("thrown by a log appender");
            }
          }
        };
    overflowing.start();
    attemptLog.addAppender(overflowing);
    try {
      assertThatThrownBy(() -> ListenerOutcomes.deferToContainer(next))
          .as("the appender's Error, passed on")
          .isInstanceOf(StackOverflowError.class);
    } finally {
      attemptLog.detachAppender(overflowing);
    }
    next.listenerSucceeded();
    ListenerOutcomes.afterRecord(current);

    assertThat(status(CURRENT))
        .as("the key of the record whose end the container reported")
        .isEqualTo(DedupStatus.SUCCESS);
    assertThat(status(ABANDONED))
        .as("the key of the abandoned record, whose listener never returned")
        .isEqualTo(DedupStatus.FAILED);
  }

  private DedupStatus status(DedupKey key) {
    return store.find(key).map(DedupRecord::status).orElse(null);
  }
}
