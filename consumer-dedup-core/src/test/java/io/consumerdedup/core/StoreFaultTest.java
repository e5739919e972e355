package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import io.consumerdedup.jdbc.JdbcDedupStore;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.slf4j.LoggerFactory;

/**
 * What a caller counts (handler runs, the record's status, lost-lease reports) when a store call
 * meets a real network fault: a reply lost after the server committed, a database that refuses
 * connections for a while, a connection that stops answering without a reset.
 */
class StoreFaultTest {
  @RegisterExtension static final FaultyStoreFixture db = new FaultyStoreFixture("store_faults");

  private IdempotentExecutor executor(IdempotentExecutor.Builder builder) {
    return db.executor(builder);
  }

  @Test
  void aClaimWhoseReplyWasLostIsRecognisedAsOursAndTheHandlerRunsAtOnce() {
    JdbcDedupStore store = db.faultyStore().build();
    IdempotentExecutor executor = executor(IdempotentExecutor.builder(store));
    DedupKey key = DedupKey.of("payment", "lost-claim-reply");
    AtomicInteger charges = new AtomicInteger();
    db.faulty().loseReplyOnce("'PROCESSING', 1");

    DedupResult<Integer> result = executor.execute(key, charges::incrementAndGet);

    assertThat(db.faulty().repliesLost()).as("claim replies lost after the commit").isEqualTo(1);
    assertThat(result.outcome()).isEqualTo(Outcome.PROCESSED);
    assertThat(result.attempt()).as("the committed claim's token, not a second claim").isEqualTo(1);
    assertThat(charges).hasValue(1);
    assertThat(store.find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
  }

  @Test
  void aSuccessWhoseReplyWasLostIsReportedAsCompletedNotAsALostLease() {
    JdbcDedupStore store = db.faultyStore().build();
    IdempotentExecutor executor =
        executor(IdempotentExecutor.builder(store).listener(db.recording()));
    DedupKey key = DedupKey.of("payment", "lost-success-reply");
    db.faulty().loseReplyOnce("SET status = 'SUCCESS'");

    DedupResult<String> result = executor.execute(key, () -> "charged");

    assertThat(db.faulty().repliesLost()).as("SUCCESS replies lost after the commit").isEqualTo(1);
    assertThat(result.outcome()).isEqualTo(Outcome.PROCESSED);
    assertThat(db.events()).containsExactly("completed lost-success-reply attempt 1");
    assertThat(store.find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
  }

  @Test
  void aFailureWhoseReplyWasLostStillLetsTheNextDeliveryRetry() {
    JdbcDedupStore store = db.faultyStore().build();
    IdempotentExecutor executor =
        executor(IdempotentExecutor.builder(store).listener(db.recording()));
    DedupKey key = DedupKey.of("payment", "lost-failed-reply");
    db.faulty().loseReplyOnce("SET status = 'FAILED'");

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

    assertThat(db.faulty().repliesLost()).isEqualTo(1);
    assertThat(db.events()).doesNotContain("leaseLost lost-failed-reply attempt 1");
    assertThat(retry.attempt()).isEqualTo(2);
    assertThat(store.find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
  }

  @Test
  void aFourSecondOutageRightAfterTheHandlerDoesNotLetAnotherConsumerRunItAgain() throws Exception {
    // The pool needs the rest of the lease after the outage to reconnect on a loaded machine.
    Duration lease = Duration.ofSeconds(8);
    IdempotentExecutor holder =
        executor(IdempotentExecutor.builder(db.faultyStore().build()).lease(lease));
    IdempotentExecutor rival = executor(IdempotentExecutor.builder(db.store()).lease(lease));
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
                        db.faulty().proxy().refuse();
                        clock.schedule(() -> db.faulty().proxy().pass(), 4, TimeUnit.SECONDS);
                        return null;
                      }))
          .as("the caller is told SUCCESS is not recorded yet")
          .isInstanceOf(DedupStoreUnavailableException.class)
          .hasMessageContaining("SUCCESS is not recorded yet");
      assertThat(db.faulty().proxy().connectionsReset()).as("connections cut").isPositive();

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
    DedupRecord record = db.store().find(key).orElseThrow();
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
                    db.faultyStore().statementTimeout(Duration.ofSeconds(1)).build())
                .lease(lease));
    IdempotentExecutor rival = executor(IdempotentExecutor.builder(db.store()).lease(lease));
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
    db.faulty().hangNextConnection();

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

    assertThat(db.faulty().hungConnections()).as("half-open connections handed out").isEqualTo(1);
    assertThat(charges).hasValue(2);
    for (DedupKey key : List.of(first, second)) {
      assertThat(db.store().find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
    }
  }

  @Test
  void aClaimOnAConnectionThatStopsAnsweringFailsOverWithinTheNetworkTimeout() {
    JdbcDedupStore store =
        db.faultyStore()
            .statementTimeout(Duration.ofSeconds(1))
            .retryMaxDuration(JdbcDedupStore.DEFAULT_RETRY_MAX_DURATION)
            .build();
    IdempotentExecutor executor = executor(IdempotentExecutor.builder(store));
    db.faulty().hangNextConnection();
    long start = System.nanoTime();

    DedupResult<String> result =
        executor.execute(DedupKey.of("payment", "half-open-claim"), () -> "charged");

    Duration took = Duration.ofNanos(System.nanoTime() - start);
    assertThat(db.faulty().hungConnections()).isEqualTo(1);
    assertThat(result.outcome()).isEqualTo(Outcome.PROCESSED);
    assertThat(took)
        .as("a hung try ends at the network timeout (2 s)")
        .isBetween(Duration.ofMillis(1500), Duration.ofSeconds(15));
  }

  @Test
  void anErrorMessageTheDatabaseCannotStoreIsStillRecordedAsFailed() {
    IdempotentExecutor executor = executor(IdempotentExecutor.builder(db.store()));
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

    DedupRecord record = db.store().find(key).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(record.lastError())
        .contains("java.lang.IllegalStateException: provider said \\0 and hung up");
  }

  /**
   * A SUCCESS mark handed over once the executor is closed is written on the caller's thread, once:
   * if the database refuses it, nothing retries it, and the log says so (the record comes again)
   * rather than that it is retried in the background.
   */
  @Test
  void aMarkTheDatabaseRefusesAfterTheExecutorClosedIsLoggedAsNotWrittenNotAsRetried() {
    IdempotentExecutor executor = executor(IdempotentExecutor.builder(db.faultyStore().build()));
    DedupClaim claim =
        executor.claim(DedupKey.of("payment", "closed-before-mark"), null, "pay-0@3");
    ListAppender<ILoggingEvent> logged = new ListAppender<>();
    logged.start();
    // The engine's internals, whichever of them reports the mark.
    Logger writer = (Logger) LoggerFactory.getLogger("io.consumerdedup.core.internal");
    writer.addAppender(logged);
    try {
      db.faulty().proxy().refuse();
      executor.close();

      CompletableFuture<Void> written = claim.completeAsync();

      assertThat(written)
          .failsWithin(Duration.ofSeconds(30))
          .withThrowableOfType(ExecutionException.class)
          .withCauseInstanceOf(DedupExecutorClosedException.class);
      assertThat(logged.list)
          .filteredOn(event -> event.getFormattedMessage().contains("pay-0@3"))
          .singleElement()
          .satisfies(
              event ->
                  assertThat(event.getFormattedMessage())
                      .contains("pay-0@3")
                      .contains("not written")
                      .contains("delivered again")
                      .doesNotContain("retrying"));
    } finally {
      writer.detachAppender(logged);
      db.faulty().proxy().pass();
    }
  }

  /**
   * A SUCCESS the database refused is written in the background once it answers, and the
   * application's listener, told of it then, throws an {@code Error} whose {@code getMessage()}
   * throws (a metrics library's). The retry reported the listener's throw as its own failure
   * ("Retrying the SUCCESS of … failed", of a SUCCESS just recorded), and, since Logback read the
   * message in that line, the line itself threw on the renewer's worker: nothing in the log said
   * what the listener did.
   */
  @Test
  void aListenerErrorOnASuccessWrittenInTheBackgroundIsLoggedAsTheListenersNotAsAFailedRetry() {
    AtomicInteger told = new AtomicInteger();
    DedupListener broken =
        new DedupListener() {
          @Override
          public void completed(DedupKey key, int attempt, Duration handlerTime) {
            told.incrementAndGet();
            throw new AssertionError() {
              private static final long serialVersionUID = 1L;

              @Override
              public String getMessage() {
                throw new IllegalStateException("the metrics registry is closed");
              }
            };
          }
        };
    IdempotentExecutor executor =
        executor(
            IdempotentExecutor.builder(db.faultyStore().build())
                .lease(Duration.ofSeconds(30))
                .listener(broken));
    DedupKey key = DedupKey.of("payment", "listener-after-retry");
    DedupClaim claim = executor.claim(key, null, "pay-0@5");
    ListAppender<ILoggingEvent> logged = new ListAppender<>();
    logged.start();
    Logger internals = (Logger) LoggerFactory.getLogger("io.consumerdedup.core.internal");
    internals.addAppender(logged);
    try {
      db.faulty().proxy().refuse();
      try {
        assertThatThrownBy(claim::complete)
            .as("the SUCCESS not written yet, kept")
            .isInstanceOf(DedupStoreUnavailableException.class);
      } finally {
        db.faulty().proxy().pass();
      }
      // What a user sees is the log, not the stack trace of a worker thread that ended.
      await()
          .atMost(Duration.ofSeconds(15))
          .dontCatchUncaughtExceptions()
          .until(() -> executor.unrecordedOutcomes().isEmpty() && told.get() > 0);
      await()
          .atMost(Duration.ofSeconds(5))
          .dontCatchUncaughtExceptions()
          .untilAsserted(
              () ->
                  assertThat(logged.list)
                      .extracting(ILoggingEvent::getFormattedMessage)
                      .as("[the log]")
                      .anySatisfy(
                          line -> assertThat(line).contains("pay-0@5").contains("DedupListener")));
    } finally {
      internals.detachAppender(logged);
    }

    assertThat(db.store().find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(told).as("the listener told of the SUCCESS, and threw").hasValue(1);
    assertThat(logged.list)
        .extracting(ILoggingEvent::getFormattedMessage)
        .as("[the log]")
        .noneSatisfy(line -> assertThat(line).contains("Retrying the SUCCESS"));
  }
}
