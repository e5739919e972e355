package io.consumerdedup.spring.internal;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatCode;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

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

/**
 * What the consumer thread's state clearing does with two {@code Error}s, on PostgreSQL: one as a
 * claim the container never reported on is settled, one as the poll's unused claims are given back.
 */
class CurrentRecordInterceptorTest {
  private static final DedupKey RETURNED = DedupKey.of("payment", "R-1");
  private static final DedupKey UNUSED = DedupKey.of("payment", "U-1");

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
    otherConsumer = IdempotentExecutor.builder(JdbcDedupStore.builder(pool).build()).build();
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

  private boolean keyAnotherConsumerCanClaim(DedupKey key) {
    try {
      otherConsumer.claim(key, null, "payments-0@" + key.bizKey()).release();
      return true;
    } catch (DedupInProgressException e) {
      return false;
    }
  }
}
