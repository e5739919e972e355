package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.FaultyDataSource;
import io.consumerdedup.testing.TestDatabase;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * What a caller counts (handler runs, the record's status, lost-lease reports) when a store call
 * meets a real network fault: a reply lost after the server committed, a database that refuses
 * connections for a while, a connection that stops answering without a reset.
 */
class StoreFaultTest {
  private static String schema;
  private static HikariDataSource direct;
  private static JdbcDedupStore rivalStore;

  private FaultyDataSource faulty;
  private final List<IdempotentExecutor> executors = new CopyOnWriteArrayList<>();
  private final List<String> events = new CopyOnWriteArrayList<>();
  private final DedupListener recording =
      new DedupListener() {
        @Override
        public void completed(DedupKey key, int attempt, Duration handlerTime) {
          events.add("completed " + key.bizKey() + " attempt " + attempt);
        }

        @Override
        public void leaseLost(DedupKey key, int attempt) {
          events.add("leaseLost " + key.bizKey() + " attempt " + attempt);
        }
      };

  @BeforeAll
  static void setUpDatabase() {
    schema = TestDatabase.newSchema("store_faults");
    direct = TestDatabase.dataSource(schema, 4);
    rivalStore = JdbcDedupStore.builder(direct).build();
  }

  @AfterAll
  static void tearDownDatabase() {
    direct.close();
    TestDatabase.dropSchema(schema);
  }

  @BeforeEach
  void setUp() {
    faulty = FaultyDataSource.on(schema, 4, Duration.ofMillis(500));
  }

  @AfterEach
  void tearDown() {
    executors.forEach(IdempotentExecutor::close);
    faulty.close();
  }

  private JdbcDedupStore.Builder faultyStore() {
    return JdbcDedupStore.builder(faulty)
        .retryInitialBackoff(Duration.ofMillis(50))
        .retryMaxBackoff(Duration.ofMillis(200))
        .retryMaxDuration(Duration.ofSeconds(1));
  }

  private IdempotentExecutor executor(IdempotentExecutor.Builder builder) {
    IdempotentExecutor executor = builder.build();
    executors.add(executor);
    return executor;
  }

  @Test
  void aClaimWhoseReplyWasLostIsRecognisedAsOursAndTheHandlerRunsAtOnce() {
    JdbcDedupStore store = faultyStore().build();
    IdempotentExecutor executor = executor(IdempotentExecutor.builder(store));
    DedupKey key = DedupKey.of("payment", "lost-claim-reply");
    AtomicInteger charges = new AtomicInteger();
    faulty.loseReplyOnce("'PROCESSING', 1");

    DedupResult<Integer> result = executor.execute(key, charges::incrementAndGet);

    assertThat(faulty.repliesLost()).as("claim replies lost after the commit").isEqualTo(1);
    assertThat(result.outcome()).isEqualTo(Outcome.PROCESSED);
    assertThat(result.attempt()).as("the committed claim's token, not a second claim").isEqualTo(1);
    assertThat(charges).hasValue(1);
    assertThat(store.find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
  }

  @Test
  void aSuccessWhoseReplyWasLostIsReportedAsCompletedNotAsALostLease() {
    JdbcDedupStore store = faultyStore().build();
    IdempotentExecutor executor = executor(IdempotentExecutor.builder(store).listener(recording));
    DedupKey key = DedupKey.of("payment", "lost-success-reply");
    faulty.loseReplyOnce("SET status = 'SUCCESS'");

    DedupResult<String> result = executor.execute(key, () -> "charged");

    assertThat(faulty.repliesLost()).as("SUCCESS replies lost after the commit").isEqualTo(1);
    assertThat(result.outcome()).isEqualTo(Outcome.PROCESSED);
    assertThat(events).containsExactly("completed lost-success-reply attempt 1");
    assertThat(store.find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
  }

  @Test
  void aFailureWhoseReplyWasLostStillLetsTheNextDeliveryRetry() {
    JdbcDedupStore store = faultyStore().build();
    IdempotentExecutor executor = executor(IdempotentExecutor.builder(store).listener(recording));
    DedupKey key = DedupKey.of("payment", "lost-failed-reply");
    faulty.loseReplyOnce("SET status = 'FAILED'");

    assertThatThrownBy(
            () ->
                executor.execute(
                    key,
                    () -> {
                      throw new IllegalStateException("bank timed out");
                    }))
        .isInstanceOf(IllegalStateException.class)
        .hasNoSuppressedExceptions();
    DedupResult<String> retry = executor.execute(key, () -> "charged");

    assertThat(faulty.repliesLost()).isEqualTo(1);
    assertThat(events).doesNotContain("leaseLost lost-failed-reply attempt 1");
    assertThat(retry.attempt()).isEqualTo(2);
    assertThat(store.find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
  }

  @Test
  void aFourSecondOutageRightAfterTheHandlerDoesNotLetAnotherConsumerRunItAgain() throws Exception {
    // The pool needs the rest of the lease after the outage to reconnect on a loaded machine.
    Duration lease = Duration.ofSeconds(8);
    IdempotentExecutor holder =
        executor(IdempotentExecutor.builder(faultyStore().build()).lease(lease));
    IdempotentExecutor rival = executor(IdempotentExecutor.builder(rivalStore).lease(lease));
    DedupKey key = DedupKey.of("payment", "outage-after-handler");
    AtomicInteger charges = new AtomicInteger();
    ScheduledExecutorService clock = Executors.newSingleThreadScheduledExecutor();
    try {
      assertThatThrownBy(
              () ->
                  holder.execute(
                      key,
                      () -> {
                        charges.incrementAndGet();
                        faulty.proxy().refuse();
                        clock.schedule(() -> faulty.proxy().pass(), 4, TimeUnit.SECONDS);
                        return null;
                      }))
          .as("the caller is told SUCCESS is not recorded yet")
          .isInstanceOf(DedupStoreUnavailableException.class)
          .hasMessageContaining("SUCCESS is not recorded yet");
      assertThat(faulty.proxy().connectionsReset()).as("connections cut").isPositive();

      // Another consumer keeps redelivering the key past the end of the first lease.
      long until = System.nanoTime() + lease.plusSeconds(3).toNanos();
      while (System.nanoTime() < until) {
        try {
          rival.execute(key, charges::incrementAndGet);
        } catch (DedupInProgressException stillHeld) {
          // retried below
        }
        Thread.sleep(200);
      }
    } finally {
      clock.shutdownNow();
    }

    assertThat(charges).as("charges").hasValue(1);
    DedupRecord record = rivalStore.find(key).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(record.attempts()).isEqualTo(1);
    assertThat(holder.unrecordedOutcomes()).isEmpty();
  }

  @Test
  void aRenewalHungOnAHalfOpenConnectionNeitherHangsForeverNorStarvesTheOtherLeases()
      throws Exception {
    Duration lease = Duration.ofSeconds(3);
    IdempotentExecutor holder =
        executor(
            IdempotentExecutor.builder(
                    faultyStore().statementTimeout(Duration.ofSeconds(1)).build())
                .lease(lease));
    IdempotentExecutor rival = executor(IdempotentExecutor.builder(rivalStore).lease(lease));
    DedupKey first = DedupKey.of("payment", "hung-renewal-a");
    DedupKey second = DedupKey.of("payment", "hung-renewal-b");
    AtomicInteger charges = new AtomicInteger();
    CountDownLatch bothHeld = new CountDownLatch(2);
    CountDownLatch release = new CountDownLatch(1);
    List<CompletableFuture<DedupResult<Object>>> holders = new CopyOnWriteArrayList<>();
    for (DedupKey key : List.of(first, second)) {
      holders.add(
          CompletableFuture.supplyAsync(
              () ->
                  holder.execute(
                      key,
                      () -> {
                        charges.incrementAndGet();
                        bothHeld.countDown();
                        release.await(30, TimeUnit.SECONDS);
                        return null;
                      })));
    }
    assertThat(bothHeld.await(10, TimeUnit.SECONDS)).isTrue();
    faulty.hangNextConnection();

    // Over two and a half leases, another consumer must never get either key.
    long until = System.nanoTime() + Duration.ofMillis(7500).toNanos();
    while (System.nanoTime() < until) {
      for (DedupKey key : List.of(first, second)) {
        assertThatThrownBy(() -> rival.execute(key, charges::incrementAndGet))
            .isInstanceOf(DedupInProgressException.class);
      }
      Thread.sleep(250);
    }
    release.countDown();
    for (CompletableFuture<DedupResult<Object>> run : holders) {
      assertThat(run.get(10, TimeUnit.SECONDS).attempt()).isEqualTo(1);
    }

    assertThat(faulty.hungConnections()).as("half-open connections handed out").isEqualTo(1);
    assertThat(charges).hasValue(2);
    for (DedupKey key : List.of(first, second)) {
      assertThat(rivalStore.find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
    }
  }

  @Test
  void aClaimOnAConnectionThatStopsAnsweringFailsOverWithinTheNetworkTimeout() {
    JdbcDedupStore store =
        faultyStore()
            .statementTimeout(Duration.ofSeconds(1))
            .retryMaxDuration(JdbcDedupStore.DEFAULT_RETRY_MAX_DURATION)
            .build();
    IdempotentExecutor executor = executor(IdempotentExecutor.builder(store));
    faulty.hangNextConnection();
    long start = System.nanoTime();

    DedupResult<String> result =
        executor.execute(DedupKey.of("payment", "half-open-claim"), () -> "charged");

    Duration took = Duration.ofNanos(System.nanoTime() - start);
    assertThat(faulty.hungConnections()).isEqualTo(1);
    assertThat(result.outcome()).isEqualTo(Outcome.PROCESSED);
    assertThat(took)
        .as("a hung try ends at the network timeout (2 s)")
        .isBetween(Duration.ofMillis(1500), Duration.ofSeconds(15));
  }

  @Test
  void anErrorMessageTheDatabaseCannotStoreIsStillRecordedAsFailed() {
    IdempotentExecutor executor = executor(IdempotentExecutor.builder(rivalStore));
    DedupKey key = DedupKey.of("payment", "nul-in-error");

    assertThatThrownBy(
            () ->
                executor.execute(
                    key,
                    () -> {
                      throw new IllegalStateException("provider said \u0000 and hung up");
                    }))
        .isInstanceOf(IllegalStateException.class)
        .hasNoSuppressedExceptions();

    DedupRecord record = rivalStore.find(key).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(record.lastError())
        .contains("java.lang.IllegalStateException: provider said \\0 and hung up");
  }
}
