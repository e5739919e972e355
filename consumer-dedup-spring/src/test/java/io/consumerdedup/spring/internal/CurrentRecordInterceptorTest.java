package io.consumerdedup.spring.internal;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatCode;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.AppenderBase;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupClaims;
import io.consumerdedup.core.DedupInProgressException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TestDatabase;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.slf4j.LoggerFactory;

/**
 * What the consumer thread's state clearing does with two {@code Error}s, on PostgreSQL: one as a
 * claim the container never reported on is settled, one as the poll's unused claims are given back;
 * and what an {@code Error} settling such a claim does to the claim of the record after it.
 */
class CurrentRecordInterceptorTest {
  private static final DedupKey RETURNED = DedupKey.of("payment", "R-1");
  private static final DedupKey UNUSED = DedupKey.of("payment", "U-1");
  private static final DedupKey ABANDONED = DedupKey.of("payment", "A-1");
  private static final DedupKey CURRENT_RECORD = DedupKey.of("payment", "C-1");

  /**
   * Stand for an application's {@code DedupListener} throwing an {@code Error} (an {@code
   * AssertionError} of a metrics backend, say) as a claim is recorded SUCCESS, and an {@code
   * OutOfMemoryError} once the claims are given back, which would end the test JVM.
   */
  private final Error completedError = new Error("injected: DedupListener.completed");

  private final Error giveBackError = new Error("injected: after giving the claims back");
  private final AtomicInteger completedCalls = new AtomicInteger();

  private String schema;
  private HikariDataSource pool;
  private IdempotentExecutor executor;
  private JdbcDedupStore otherStore;
  private IdempotentExecutor otherConsumer;

  @BeforeEach
  void setUp() {
    schema = TestDatabase.newSchema("current_record");
    pool = TestDatabase.dataSource(schema, 4);
    executor =
        IdempotentExecutor.builder(JdbcDedupStore.builder(pool).build())
            .listener(
                new DedupListener() {
                  @Override
                  public void completed(DedupKey key, int attempt, Duration handlerTime) {
                    completedCalls.incrementAndGet();
                    throw completedError;
                  }
                })
            .build();
    otherStore = JdbcDedupStore.builder(pool).build();
    otherConsumer = IdempotentExecutor.builder(otherStore).build();
  }

  @AfterEach
  void tearDown() {
    otherConsumer.close();
    executor.close();
    pool.close();
    TestDatabase.dropSchema(schema);
  }

  /**
   * Both throw: every claim is still ended, once, and the {@code Error} thrown before the next poll
   * (which stops the container) is the first, with the later one added as suppressed. Before, the
   * give-back ran in a {@code finally}, so its {@code Error} replaced the first, which was lost.
   */
  @Test
  void bothErrorsAreThrownBeforeTheNextPollTheFirstWithTheLaterSuppressedEveryClaimEndedOnce() {
    PollAwareConsumer<String, String> consumer =
        new PollAwareConsumer<>(new MockConsumer<>("earliest"));
    ConsumerRecord<Object, Object> record =
        new ConsumerRecord<>("payments", 0, 7, null, "charge 10");
    // A record whose listener returned, with no transaction, but whose end the container never
    // reported (an Error in another interceptor's success, say): recorded SUCCESS as the state is
    // cleared.
    CurrentRecordInterceptor.INSTANCE.intercept(record, castConsumer(consumer));
    ListenerOutcomes.Pending pending =
        ListenerOutcomes.pending(
            record, executor.claim(RETURNED, null, "payments-0@7"), new AttemptLimit(3));
    ListenerOutcomes.deferToContainer(pending);
    pending.listenerSucceeded();
    // A claim of the poll that no listener call used.
    DedupClaims unused =
        executor.claimAll(List.of(new IdempotentExecutor.Delivery(UNUSED, null, "payments-0@8")));
    consumer
        .poll()
        .claims(
            new Object(),
            listener ->
                () -> {
                  unused.releaseUnended();
                  throw giveBackError;
                });

    CurrentRecordInterceptor.INSTANCE.clearThreadState(consumer);

    DedupRecord returned = executor.store().find(RETURNED).orElseThrow();
    assertThat(returned.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(returned.attempts()).isEqualTo(1);
    assertThat(completedCalls).as("recorded SUCCESS once").hasValue(1);
    assertThat(keyAnotherConsumerCanClaim(UNUSED)).as("the unused claim given back").isTrue();
    assertThatThrownBy(() -> CurrentRecordInterceptor.INSTANCE.setupThreadState(consumer))
        .as("the first Error, the later one suppressed")
        .isSameAs(completedError)
        .satisfies(error -> assertThat(error.getSuppressed()).containsExactly(giveBackError));

    assertThatCode(() -> CurrentRecordInterceptor.INSTANCE.setupThreadState(consumer))
        .as("thrown once")
        .doesNotThrowAnyException();
  }

  @SuppressWarnings("unchecked")
  private static org.apache.kafka.clients.consumer.Consumer<Object, Object> castConsumer(
      org.apache.kafka.clients.consumer.Consumer<?, ?> consumer) {
    return (org.apache.kafka.clients.consumer.Consumer<Object, Object>) consumer;
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
            abandoned, otherConsumer.claim(ABANDONED, null, "payments-0@7"), attempts));
    ListenerOutcomes.Pending next =
        ListenerOutcomes.pending(
            current, otherConsumer.claim(CURRENT_RECORD, null, "payments-0@8"), attempts);

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

    assertThat(status(CURRENT_RECORD))
        .as("the key of the record whose end the container reported")
        .isEqualTo(DedupStatus.SUCCESS);
    assertThat(status(ABANDONED))
        .as("the key of the abandoned record, whose listener never returned")
        .isEqualTo(DedupStatus.FAILED);
  }

  private DedupStatus status(DedupKey key) {
    return otherStore.find(key).map(DedupRecord::status).orElse(null);
  }

  private boolean keyAnotherConsumerCanClaim(DedupKey key) {
    try {
      otherConsumer.claim(key, null, "payments-0@" + key.bizKey()).release();
      return true;
    } catch (DedupInProgressException e) {
      return false;
    }
  }
}
