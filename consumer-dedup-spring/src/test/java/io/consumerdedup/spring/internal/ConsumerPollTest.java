package io.consumerdedup.spring.internal;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupClaims;
import io.consumerdedup.core.DedupInProgressException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TestDatabase;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** What a consumer's poll gives back of its listeners' unused claims, on PostgreSQL. */
class ConsumerPollTest {
  private static final List<DedupKey> KEYS =
      List.of(DedupKey.of("payment", "P-1"), DedupKey.of("payment", "P-2"));

  /**
   * Stands for an {@code OutOfMemoryError} from the store's pool, or an {@code Error} of the
   * application's {@code DedupListener}; an {@code OutOfMemoryError} would end the test JVM.
   */
  private final Error giveBackError = new Error("injected: giving the claims back failed");

  private String schema;
  private HikariDataSource pool;
  private IdempotentExecutor consumer;
  private IdempotentExecutor otherConsumer;

  @BeforeEach
  void setUp() {
    schema = TestDatabase.newSchema("consumer_poll");
    pool = TestDatabase.dataSource(schema, 4);
    consumer = IdempotentExecutor.builder(JdbcDedupStore.builder(pool).build()).build();
    otherConsumer = IdempotentExecutor.builder(JdbcDedupStore.builder(pool).build()).build();
  }

  @AfterEach
  void tearDown() {
    otherConsumer.close();
    consumer.close();
    pool.close();
    TestDatabase.dropSchema(schema);
  }

  /**
   * Two {@code @Idempotent} methods called for the records of one poll (a listener calling one per
   * biz type, say) each hold claims their calls never used, and giving back the first one's meets
   * an {@code Error} (an {@code OutOfMemoryError} from the store's pool, an application's {@code
   * DedupListener} throwing one): the second one's are given back all the same, and the {@code
   * Error} goes on (out of the consumer's poll, which stops the container).
   */
  @Test
  void anErrorGivingBackOneListenersClaimsStillGivesBackTheOthers() {
    ConsumerPoll poll = pollWithTwoListenersWhoseFirstGiveBackFails();

    assertThatThrownBy(poll::releaseClaims).isSameAs(giveBackError);

    assertThat(keysAnotherConsumerCanClaim())
        .as("keys given back (the one whose give-back met the Error waits for its lease)")
        .hasSize(1);
  }

  /**
   * As above, as a listener call fails: the listener's own exception goes on to the container's
   * error handler, with the give-back's {@code Error} added as suppressed, and the other listener's
   * claims are given back.
   */
  @Test
  void anErrorGivingBackClaimsAfterAFailedListenerCallKeepsTheListenersException() {
    ConsumerPoll poll = pollWithTwoListenersWhoseFirstGiveBackFails();
    IllegalStateException listenerFailure = new IllegalStateException("payment service down");

    poll.listenerFailed(new ConsumerRecord<>("payments", 0, 1, null, "charge 10"), listenerFailure);

    assertThat(listenerFailure.getSuppressed()).containsExactly(giveBackError);
    assertThat(keysAnotherConsumerCanClaim()).hasSize(1);
  }

  /**
   * A poll in which two listeners each claimed one key; the first give-back tried, whichever
   * listener's it is, meets an {@code Error} before reaching the database.
   */
  private ConsumerPoll pollWithTwoListenersWhoseFirstGiveBackFails() {
    ConsumerPoll poll = new ConsumerPoll();
    AtomicBoolean oneFailed = new AtomicBoolean();
    for (DedupKey key : KEYS) {
      DedupClaims claims =
          consumer.claimAll(
              List.of(new IdempotentExecutor.Delivery(key, null, "payments-0@" + key.bizKey())));
      poll.claims(
          new Object(),
          listener ->
              () -> {
                if (oneFailed.compareAndSet(false, true)) {
                  throw giveBackError;
                }
                claims.releaseUnended();
              });
    }
    assertThat(keysAnotherConsumerCanClaim()).as("claimed by the poll").isEmpty();
    return poll;
  }

  private List<DedupKey> keysAnotherConsumerCanClaim() {
    return KEYS.stream()
        .filter(
            key -> {
              try {
                otherConsumer.claim(key, null, "payments-0@" + key.bizKey()).release();
                return true;
              } catch (DedupInProgressException e) {
                return false;
              }
            })
        .toList();
  }
}
