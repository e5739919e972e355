package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.catchThrowable;
import static org.awaitility.Awaitility.await;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.ReplyLosingStore;
import io.consumerdedup.testing.TestDatabase;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.AbstractList;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * A claim whose reply was lost after the database committed it, taken up again by the same
 * executor: by one caller only, and with a lease that runs from then.
 */
class UnansweredClaimTest {
  private static String schema;
  private static HikariDataSource dataSource;

  @BeforeAll
  static void setUp() {
    schema = TestDatabase.newSchema("unanswered");
    dataSource = TestDatabase.dataSource(schema, 6);
  }

  @AfterAll
  static void tearDown() {
    dataSource.close();
    TestDatabase.dropSchema(schema);
  }

  @Test
  void twoThreadsSharingTheExecutorAfterAnUnansweredClaimRunTheHandlerOnce() throws Exception {
    twoCallersAfterAnUnansweredClaimRunTheHandlerOnce(dataSource);
  }

  @Test
  void aClaimTakenUpNearTheEndOfItsLeaseIsNotTakenOverDuringASlowHandler() throws Exception {
    aClaimTakenUpNearTheEndOfItsLeaseHoldsTheKeyThroughASlowHandler(dataSource);
  }

  @Test
  void aClaimWhoseAnswerWasLostToAnErrorIsTakenUpByTheNextDelivery() {
    JdbcDedupStore store = JdbcDedupStore.builder(dataSource).build();
    ReplyLosingStore losing = ReplyLosingStore.in(store);
    DedupKey key = DedupKey.of("payment", "error-" + UUID.randomUUID());
    AtomicInteger runs = new AtomicInteger();
    try (IdempotentExecutor executor = IdempotentExecutor.builder(losing.store()).build()) {
      losing.loseNextClaimReplyTo(new OutOfMemoryError("Java heap space (injected)"));
      assertThatThrownBy(() -> executor.execute(key, runs::incrementAndGet))
          .isInstanceOf(OutOfMemoryError.class);
      assertThat(store.find(key).orElseThrow().status())
          .as("the claim committed")
          .isEqualTo(DedupStatus.PROCESSING);

      // The delivery comes again (the loop that met the Error was replaced): with the default
      // lease of 5 minutes, "in progress" here would hold the record for 5 minutes.
      DedupResult<Integer> again = executor.execute(key, runs::incrementAndGet);

      assertThat(again.outcome()).isEqualTo(Outcome.PROCESSED);
      assertThat(runs).as("handler runs").hasValue(1);
      DedupRecord record = store.find(key).orElseThrow();
      assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
      assertThat(record.attempts()).as("the committed claim's own attempt").isEqualTo(1);
    }
  }

  @Test
  void aClaimTakenUpWhileTheDatabaseRefusesWritesIsTakenUpByTheNextDelivery() throws Exception {
    JdbcDedupStore store = JdbcDedupStore.builder(dataSource).build();
    ReplyLosingStore losing = ReplyLosingStore.in(store);
    DedupKey key = DedupKey.of("payment", "refused-" + UUID.randomUUID());
    AtomicInteger runs = new AtomicInteger();
    try (IdempotentExecutor executor = IdempotentExecutor.builder(losing.store()).build()) {
      losing.loseNextClaimReply();
      assertThatThrownBy(() -> executor.execute(key, runs::incrementAndGet))
          .isInstanceOf(DedupStoreUnavailableException.class);
      assertThat(store.find(key).orElseThrow().status())
          .as("the unanswered claim committed")
          .isEqualTo(DedupStatus.PROCESSING);

      // The redelivery meets a database that refuses writes for a while (a role's grant revoked
      // and given back by a migration): an error that is not "unavailable". A standby still
      // read-only after a failover (25006) is "unavailable" (ReadOnlyServerTest).
      refuseWrites(true);
      try {
        assertThatThrownBy(() -> executor.execute(key, runs::incrementAndGet))
            .isInstanceOf(DedupStoreException.class)
            .isNotInstanceOf(DedupStoreUnavailableException.class);
      } finally {
        refuseWrites(false);
      }

      // With the default lease of 5 minutes, "in progress" here would hold the record for 5
      // minutes, by this process's own claim.
      DedupResult<Integer> again = executor.execute(key, runs::incrementAndGet);

      assertThat(again.outcome()).isEqualTo(Outcome.PROCESSED);
      assertThat(runs).as("handler runs").hasValue(1);
      DedupRecord record = store.find(key).orElseThrow();
      assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
      assertThat(record.attempts()).as("the unanswered claim's own attempt").isEqualTo(1);
    }
  }

  @Test
  void aBatchTakenUpWhileTheDatabaseRefusesWritesIsTakenUpByTheNextPoll() throws Exception {
    JdbcDedupStore store = JdbcDedupStore.builder(dataSource).build();
    ReplyLosingStore losing = ReplyLosingStore.in(store);
    String run = UUID.randomUUID().toString();
    List<IdempotentExecutor.Delivery> poll = new ArrayList<>();
    for (int i = 0; i < 3; i++) {
      poll.add(
          new IdempotentExecutor.Delivery(
              DedupKey.of("payment", "refused-batch-" + run + "-" + i), null, "payments-0@" + i));
    }
    try (IdempotentExecutor executor = IdempotentExecutor.builder(losing.store()).build()) {
      losing.loseNextClaimReply();
      assertThatThrownBy(() -> executor.claimAll(poll))
          .isInstanceOf(DedupStoreUnavailableException.class);
      refuseWrites(true);
      try {
        assertThatThrownBy(() -> executor.claimAll(poll))
            .isInstanceOf(DedupStoreException.class)
            .isNotInstanceOf(DedupStoreUnavailableException.class);
      } finally {
        refuseWrites(false);
      }

      assertThat(completeEach(executor.claimAll(poll)))
          .containsExactly("held 1", "held 1", "held 1");
    }
  }

  /**
   * Makes the dedup table refuse writes as a revoked grant does (SQL state 42501, not transient),
   * or not.
   */
  private static void refuseWrites(boolean refuse) throws SQLException {
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement()) {
      if (refuse) {
        statement.execute(
            "CREATE FUNCTION refuse_writes() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
                + " RAISE EXCEPTION 'permission denied to % consumer_dedup', TG_OP"
                + " USING ERRCODE = '42501'; END $$");
        statement.execute(
            "CREATE TRIGGER refuse_writes BEFORE INSERT OR UPDATE ON consumer_dedup"
                + " FOR EACH ROW EXECUTE FUNCTION refuse_writes()");
      } else {
        statement.execute("DROP TRIGGER refuse_writes ON consumer_dedup");
        statement.execute("DROP FUNCTION refuse_writes()");
      }
    }
  }

  @Test
  void aBatchWhoseAnswerWasLostToAnErrorIsTakenUpByTheNextPoll() {
    JdbcDedupStore store = JdbcDedupStore.builder(dataSource).build();
    ReplyLosingStore losing = ReplyLosingStore.in(store);
    String run = UUID.randomUUID().toString();
    List<IdempotentExecutor.Delivery> poll = new ArrayList<>();
    for (int i = 0; i < 3; i++) {
      poll.add(
          new IdempotentExecutor.Delivery(
              DedupKey.of("payment", "error-batch-" + run + "-" + i), null, "payments-0@" + i));
    }
    try (IdempotentExecutor executor = IdempotentExecutor.builder(losing.store()).build()) {
      losing.loseNextClaimReplyTo(new StackOverflowError("injected"));
      assertThatThrownBy(() -> executor.claimAll(poll)).isInstanceOf(StackOverflowError.class);
      for (IdempotentExecutor.Delivery delivery : poll) {
        assertThat(store.find(delivery.key()).orElseThrow().status())
            .as("the claim of %s committed", delivery.key())
            .isEqualTo(DedupStatus.PROCESSING);
      }

      assertThat(completeEach(executor.claimAll(poll)))
          .containsExactly("held 1", "held 1", "held 1");
    }
  }

  @Test
  void aClaimIdTakenForABatchThatAnErrorStoppedIsTakenUpByTheNextPoll() {
    JdbcDedupStore store = JdbcDedupStore.builder(dataSource).build();
    ReplyLosingStore losing = ReplyLosingStore.in(store);
    String run = UUID.randomUUID().toString();
    List<IdempotentExecutor.Delivery> poll = new ArrayList<>();
    for (int i = 0; i < 3; i++) {
      poll.add(
          new IdempotentExecutor.Delivery(
              DedupKey.of("payment", "stopped-batch-" + run + "-" + i), null, "payments-0@" + i));
    }
    // The caller's deliveries built as they are read: the second one meets an Error, after the
    // first one's claim id was taken and before the batch was sent.
    List<IdempotentExecutor.Delivery> lazy =
        new AbstractList<>() {
          @Override
          public IdempotentExecutor.Delivery get(int index) {
            if (index == 1) {
              throw new OutOfMemoryError("Java heap space (injected)");
            }
            return poll.get(index);
          }

          @Override
          public int size() {
            return poll.size();
          }
        };
    try (IdempotentExecutor executor = IdempotentExecutor.builder(losing.store()).build()) {
      losing.loseNextClaimReplyTo(new StackOverflowError("injected"));
      assertThatThrownBy(() -> executor.claimAll(poll)).isInstanceOf(StackOverflowError.class);
      assertThatThrownBy(() -> executor.claimAll(lazy)).isInstanceOf(OutOfMemoryError.class);
      assertThat(losing.repliesLost()).as("claim replies lost").isEqualTo(1);

      assertThat(completeEach(executor.claimAll(poll)))
          .containsExactly("held 1", "held 1", "held 1");
    }
  }

  /**
   * Loses the reply of a committed claim of a key, then lets two threads of the same executor
   * deliver the key at once; shared with the other databases' tests.
   */
  static void twoCallersAfterAnUnansweredClaimRunTheHandlerOnce(DataSource dataSource)
      throws Exception {
    JdbcDedupStore store = JdbcDedupStore.builder(dataSource).build();
    ReplyLosingStore losing = ReplyLosingStore.in(store);
    DedupKey key = DedupKey.of("payment", "unanswered-" + UUID.randomUUID());
    AtomicInteger runs = new AtomicInteger();
    ExecutorService threads = Executors.newFixedThreadPool(2);
    try (IdempotentExecutor executor = IdempotentExecutor.builder(losing.store()).build()) {
      losing.loseNextClaimReply();
      assertThatThrownBy(() -> executor.execute(key, runs::incrementAndGet))
          .isInstanceOf(DedupStoreUnavailableException.class);
      assertThat(losing.repliesLost()).as("claim replies lost").isEqualTo(1);
      assertThat(store.find(key).orElseThrow().status())
          .as("the unanswered claim committed")
          .isEqualTo(DedupStatus.PROCESSING);

      CountDownLatch go = new CountDownLatch(1);
      CountDownLatch handlerMayEnd = new CountDownLatch(1);
      List<Future<String>> answers = new ArrayList<>();
      for (int i = 0; i < 2; i++) {
        answers.add(
            threads.submit(
                () -> {
                  go.await();
                  try {
                    return executor
                        .execute(
                            key,
                            () -> {
                              runs.incrementAndGet();
                              return handlerMayEnd.await(10, TimeUnit.SECONDS);
                            })
                        .outcome()
                        .name();
                  } catch (DedupInProgressException e) {
                    return "IN_PROGRESS";
                  }
                }));
      }
      go.countDown();
      // Both have had the store's answer: both are in the handler, or one is and one returned.
      await()
          .atMost(Duration.ofSeconds(10))
          .until(
              () ->
                  runs.get() == 2
                      || (runs.get() == 1 && answers.stream().anyMatch(Future::isDone)));
      handlerMayEnd.countDown();
      List<String> outcomes = new ArrayList<>();
      for (Future<String> answer : answers) {
        outcomes.add(answer.get(10, TimeUnit.SECONDS));
      }

      assertThat(runs).as("handler runs").hasValue(1);
      assertThat(outcomes).containsExactlyInAnyOrder("PROCESSED", "IN_PROGRESS");
      DedupRecord record = store.find(key).orElseThrow();
      assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
      assertThat(record.attempts()).as("the unanswered claim's own attempt").isEqualTo(1);
    } finally {
      threads.shutdownNow();
    }
  }

  /**
   * Loses the reply of a committed claim, waits until its lease is nearly over, and delivers the
   * key again to the same executor, whose handler outlasts the old lease while another consumer
   * keeps trying the key; shared with the other databases' tests.
   */
  static void aClaimTakenUpNearTheEndOfItsLeaseHoldsTheKeyThroughASlowHandler(DataSource dataSource)
      throws Exception {
    Duration lease = Duration.ofSeconds(2);
    JdbcDedupStore store = JdbcDedupStore.builder(dataSource).build();
    ReplyLosingStore losing = ReplyLosingStore.in(store);
    DedupKey key = DedupKey.of("payment", "unanswered-late-" + UUID.randomUUID());
    AtomicInteger runs = new AtomicInteger();
    AtomicInteger rivalRefused = new AtomicInteger();
    try (IdempotentExecutor holder =
            IdempotentExecutor.builder(losing.store()).ownerId("holder").lease(lease).build();
        IdempotentExecutor rival =
            IdempotentExecutor.builder(store).ownerId("rival").lease(lease).build()) {
      losing.loseNextClaimReply();
      assertThatThrownBy(() -> holder.execute(key, runs::incrementAndGet))
          .isInstanceOf(DedupStoreUnavailableException.class);
      assertThat(losing.repliesLost()).as("claim replies lost").isEqualTo(1);
      DedupRecord unanswered = store.find(key).orElseThrow();
      Thread.sleep(lease.multipliedBy(7).dividedBy(10).toMillis());

      DedupClaim claim = holder.claim(key, null, "payments-0@7");
      DedupRecord takenUp = store.find(key).orElseThrow();
      runs.incrementAndGet();
      // The slow handler: it outlasts the old lease while another consumer tries the key.
      long until = System.nanoTime() + lease.multipliedBy(3).dividedBy(2).toNanos();
      while (System.nanoTime() < until) {
        try {
          rival.execute(key, runs::incrementAndGet);
        } catch (DedupInProgressException expected) {
          rivalRefused.incrementAndGet();
        }
        Thread.sleep(100);
      }
      boolean lostDuringHandler = claim.isLeaseLost();
      Throwable completion = catchThrowable(claim::complete);

      assertThat(claim.attempt()).as("the unanswered claim's own attempt").isEqualTo(1);
      assertThat(takenUp.leaseUntil().orElseThrow())
          .as("the lease runs from the claim that took it up, by the database clock")
          .isEqualTo(takenUp.updatedAt().plus(lease))
          .isAfter(unanswered.leaseUntil().orElseThrow());
      assertThat(runs).as("handler runs").hasValue(1);
      assertThat(rivalRefused).as("rival deliveries told in progress").hasPositiveValue();
      assertThat(completion).as("SUCCESS under the lease it took up").isNull();
      assertThat(lostDuringHandler).as("isLeaseLost").isFalse();
      DedupRecord record = store.find(key).orElseThrow();
      assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
      assertThat(record.owner()).isEqualTo("holder");
    }
  }

  /** Completes each claim of {@code claims}: "held <attempt>", or "in progress" where refused. */
  private static List<String> completeEach(DedupClaims claims) {
    List<String> answers = new ArrayList<>();
    for (int i = 0; i < claims.size(); i++) {
      try {
        DedupClaim claim = claims.get(i);
        claim.complete();
        answers.add("held " + claim.attempt());
      } catch (DedupInProgressException e) {
        answers.add("in progress");
      }
    }
    return answers;
  }
}
