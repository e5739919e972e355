package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;
import static org.awaitility.Awaitility.await;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.internal.FaultPoints;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.InterceptedStore;
import io.consumerdedup.testing.TestDatabase;
import java.sql.Connection;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.slf4j.LoggerFactory;

/**
 * What a caller sees when the executor closes under a claim still held: its outcome, which the
 * database does not take, is given up as close() gives up outcomes, and the caller is told so in
 * the executor's own terms.
 */
class ExecutorClosingTest {
  @RegisterExtension static final FaultyStoreFixture db = new FaultyStoreFixture("closing");

  private final ListAppender<ILoggingEvent> logged = new ListAppender<>();
  // The engine's internals, whichever of them reports the outcome.
  private final Logger internals = (Logger) LoggerFactory.getLogger("io.consumerdedup.core");

  @BeforeEach
  void watchTheLog() {
    logged.start();
    internals.addAppender(logged);
  }

  @AfterEach
  void stopWatching() {
    internals.detachAppender(logged);
    db.faulty().proxy().pass();
  }

  private List<String> errorsAbout(String where) {
    return logged.list.stream()
        .filter(event -> event.getLevel() == Level.ERROR)
        .map(ILoggingEvent::getFormattedMessage)
        .filter(message -> message.contains(where))
        .toList();
  }

  @Test
  void aSuccessTheDatabaseRefusesAfterTheExecutorClosedIsGivenUpAsTheCloseGivesUpOutcomes() {
    IdempotentExecutor executor = db.executor(IdempotentExecutor.builder(db.faultyStore().build()));
    DedupKey key = DedupKey.of("payment", "closed-while-handled");
    AtomicInteger charges = new AtomicInteger();

    Throwable thrown =
        catchThrowable(
            () ->
                executor.execute(
                    key,
                    null,
                    "pay-0@11",
                    () -> {
                      charges.incrementAndGet();
                      executor.close(); // the application shuts down meanwhile
                      db.faulty().proxy().refuse(); // and the database is out of reach
                      return null;
                    }));

    assertThat(thrown)
        .as("the caller is told the executor closed before SUCCESS was recorded")
        .isInstanceOf(DedupExecutorClosedException.class)
        .hasMessageContaining("SUCCESS")
        .hasCauseInstanceOf(DedupStoreException.class);
    assertThat(executor.unrecordedOutcomes()).as("nothing retries it any more").isEmpty();
    assertThat(errorsAbout("pay-0@11")).as("ERROR lines naming the delivery").hasSize(1);
    assertThat(charges).hasValue(1);
    db.faulty().proxy().pass();
    assertThat(db.store().find(key).orElseThrow().status())
        .as("left to its lease, as the outcomes a close gives up")
        .isEqualTo(DedupStatus.PROCESSING);
  }

  @Test
  void aFailureTheDatabaseRefusesAfterTheExecutorClosedStillThrowsTheHandlersException() {
    IdempotentExecutor executor = db.executor(IdempotentExecutor.builder(db.faultyStore().build()));
    DedupKey key = DedupKey.of("payment", "closed-while-failing");

    Throwable thrown =
        catchThrowable(
            () ->
                executor.execute(
                    key,
                    null,
                    "pay-0@12",
                    () -> {
                      executor.close();
                      db.faulty().proxy().refuse();
                      throw new IllegalStateException("bank timed out");
                    }));

    assertThat(thrown)
        .as("the handler's own exception, with why FAILED is not recorded")
        .isInstanceOf(IllegalStateException.class)
        .hasMessage("bank timed out");
    assertThat(thrown.getSuppressed()).singleElement().isInstanceOf(DedupStoreException.class);
    assertThat(executor.unrecordedOutcomes()).as("nothing retries it any more").isEmpty();
    assertThat(errorsAbout("pay-0@12")).as("ERROR lines naming the delivery").hasSize(1);
    db.faulty().proxy().pass();
    assertThat(db.store().find(key).orElseThrow().status()).isEqualTo(DedupStatus.PROCESSING);
  }

  /**
   * A SUCCESS mark parked for its thread's next claim ({@link DedupClaim#completeWithNextClaim()})
   * whose short wait ends while close() waits for a busy outcome writer: close() writes it, on its
   * own thread, rather than the lease timer that close() stops.
   */
  @Test
  void aMarkLeftForTheNextClaimAsTheExecutorClosesIsWrittenByTheClose() throws Exception {
    ExecutorService threads = Executors.newFixedThreadPool(2);
    CountDownLatch writerHeld = new CountDownLatch(1);
    CountDownLatch releaseWriter = new CountDownLatch(1);
    try (HikariDataSource onePool = TestDatabase.dataSource(db.schema(), 1)) {
      IdempotentExecutor executor =
          db.executor(IdempotentExecutor.builder(JdbcDedupStore.builder(onePool).build()));
      DedupKey busy = DedupKey.of("payment", "writer-busy");
      DedupKey parked = DedupKey.of("payment", "parked-at-close");
      DedupClaim busyClaim = executor.claim(busy, null, "pay-0@20");
      DedupClaim parkedClaim = executor.claim(parked, null, "pay-0@21");
      // The outcome writer busy with another record's mark, so that close() waits for it.
      FaultPoints.install(
          point -> {
            if (point == FaultPoints.Point.BEFORE_SUCCESS_MARK
                && Thread.currentThread().getName().equals("consumer-dedup-outcome-writer")) {
              writerHeld.countDown();
              try {
                releaseWriter.await(30, TimeUnit.SECONDS);
              } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
              }
            }
          });
      CompletableFuture<Void> busyWritten = busyClaim.completeAsync();
      assertThat(writerHeld.await(10, TimeUnit.SECONDS)).as("writer busy").isTrue();
      CountDownLatch go = new CountDownLatch(1);
      Future<?> closing =
          threads.submit(
              () -> {
                go.await();
                executor.close();
                return null;
              });
      CompletableFuture<Void> written;
      // The pool's one connection taken meanwhile by another part of the application: whoever
      // writes the parked mark waits for it.
      try (Connection held = onePool.getConnection()) {
        written = parkedClaim.completeWithNextClaim(); // the poll ended: no next claim comes
        go.countDown();
        try {
          closing.get(3, TimeUnit.SECONDS);
        } catch (TimeoutException stillClosing) {
          // close() writes the parked mark: it waits for the connection
        }
        releaseWriter.countDown();
      }
      closing.get(60, TimeUnit.SECONDS);

      assertThat(written).as("the parked mark's future").succeedsWithin(Duration.ofSeconds(30));
      assertThat(errorsAbout("pay-0@21")).as("ERROR lines naming the parked delivery").isEmpty();
      assertThat(db.store().find(parked).orElseThrow().status())
          .as("not left PROCESSING for a whole lease")
          .isEqualTo(DedupStatus.SUCCESS);
      busyWritten.handle((done, failed) -> null).get(30, TimeUnit.SECONDS);
    } finally {
      FaultPoints.install(null);
      releaseWriter.countDown();
      threads.shutdownNow();
    }
  }

  /**
   * An application that stops on an interrupted thread (a shutdown hook on a pool shut down with
   * {@code shutdownNow}, or the usual {@code interrupt()} restored after an InterruptedException
   * before a {@code finally} that closes the executor), while another thread has the pool's one
   * connection for a moment and a SUCCESS mark is still to be written.
   */
  @Test
  void theMarksStillToWriteAreWrittenByACloseOnAnInterruptedThread() throws Exception {
    try (HikariDataSource onePool = TestDatabase.dataSource(db.schema(), 1)) {
      IdempotentExecutor executor =
          db.executor(IdempotentExecutor.builder(JdbcDedupStore.builder(onePool).build()));
      DedupKey key = DedupKey.of("payment", "closed-interrupted");
      DedupClaim claim = executor.claim(key, null, "pay-0@30");
      Connection busy = onePool.getConnection();
      CompletableFuture<Void> handedBack =
          CompletableFuture.runAsync(
              () -> {
                try {
                  Thread.sleep(300);
                  busy.close();
                } catch (Exception e) {
                  throw new IllegalStateException(e);
                }
              });
      CompletableFuture<Void> written = claim.completeWithNextClaim(); // the poll's last record

      Thread.currentThread().interrupt();
      try {
        executor.close();
      } finally {
        assertThat(Thread.interrupted()).as("the caller's interrupt is still set").isTrue();
      }
      handedBack.get(10, TimeUnit.SECONDS);

      assertThat(written).as("the mark's future").succeedsWithin(Duration.ofSeconds(10));
      assertThat(errorsAbout("pay-0@30")).as("ERROR lines naming the delivery").isEmpty();
      assertThat(db.store().find(key).orElseThrow().status())
          .as("not left PROCESSING for a whole lease, its record delivered again")
          .isEqualTo(DedupStatus.SUCCESS);
    }
  }

  /**
   * A SUCCESS that could not be written is kept, and its background retry is on its way (its
   * statement sent, not answered yet) as the executor closes. The close gave it up under that
   * retry: an ERROR said it was not recorded and that another consumer might run the handler again,
   * and the retry then recorded it.
   */
  @Test
  void aKeptSuccessWhoseRetryIsOnItsWayAsTheExecutorClosesIsLeftToThatRetry() throws Exception {
    DedupStore real = db.store();
    AtomicInteger completions = new AtomicInteger();
    CountDownLatch retryOnItsWay = new CountDownLatch(1);
    CountDownLatch mayAnswer = new CountDownLatch(1);
    DedupStore store =
        InterceptedStore.before(
            real,
            (method, args) -> {
              if (method.getName().equals("complete")) {
                int call = completions.incrementAndGet();
                if (call == 1) {
                  throw new DedupStoreException("Connection refused", null, null, null);
                }
                if (call == 2) {
                  retryOnItsWay.countDown();
                  awaitUninterruptibly(mayAnswer); // a statement on the wire
                }
              }
            });
    IdempotentExecutor executor =
        db.executor(
            IdempotentExecutor.builder(store)
                .lease(Duration.ofSeconds(3))
                .renewalInterval(Duration.ofMillis(200)));
    DedupKey key = DedupKey.of("payment", "kept-while-closing");
    DedupClaim claim = executor.claim(key, null, "pay-0@12");
    assertThat(catchThrowable(claim::complete)).isInstanceOf(DedupStoreUnavailableException.class);
    assertThat(retryOnItsWay.await(10, TimeUnit.SECONDS)).as("the retry is on its way").isTrue();

    executor.close();
    mayAnswer.countDown();

    await()
        .atMost(Duration.ofSeconds(10))
        .until(() -> db.store().find(key).orElseThrow().status() == DedupStatus.SUCCESS);
    assertThat(errorsAbout("pay-0@12")).as("ERRORs about the record").isEmpty();
  }

  /**
   * A redelivery of a key whose SUCCESS is kept writes that SUCCESS first, on its own thread, and
   * its statement is on its way as the executor closes. The close gave the outcome up under that
   * write: an ERROR said it was not recorded and that another consumer might run the handler again,
   * and the redelivery's write then recorded it.
   */
  @Test
  void aKeptSuccessWrittenByARedeliveryAsTheExecutorClosesIsLeftToThatWrite() throws Exception {
    DedupStore real = db.store();
    CountDownLatch redeliveryWriting = new CountDownLatch(1);
    CountDownLatch mayAnswer = new CountDownLatch(1);
    DedupStore store =
        InterceptedStore.before(
            real,
            (method, args) -> {
              if (method.getName().equals("complete")) {
                if (!Thread.currentThread().getName().equals("redelivery")) {
                  // The first write, and each background retry: the database away.
                  throw new DedupStoreException("Connection refused", null, null, null);
                }
                redeliveryWriting.countDown();
                awaitUninterruptibly(mayAnswer); // a statement on the wire
              }
            });
    IdempotentExecutor executor =
        db.executor(
            IdempotentExecutor.builder(store)
                .lease(Duration.ofSeconds(30))
                .renewalInterval(Duration.ofSeconds(10)));
    DedupKey key = DedupKey.of("payment", "settled-while-closing");
    DedupClaim claim = executor.claim(key, null, "pay-0@13");
    assertThat(catchThrowable(claim::complete)).isInstanceOf(DedupStoreUnavailableException.class);
    Thread redelivery =
        new Thread(() -> catchThrowable(() -> executor.claim(key, null, "pay-0@13")), "redelivery");
    redelivery.start();
    try {
      assertThat(redeliveryWriting.await(10, TimeUnit.SECONDS))
          .as("the redelivery writes the kept SUCCESS")
          .isTrue();

      executor.close();
    } finally {
      mayAnswer.countDown();
      redelivery.join(10_000);
    }

    assertThat(db.store().find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(errorsAbout("pay-0@13")).as("ERRORs about the record").isEmpty();
  }

  private static void awaitUninterruptibly(CountDownLatch latch) {
    boolean interrupted = false;
    try {
      while (true) {
        try {
          latch.await();
          return;
        } catch (InterruptedException e) {
          interrupted = true;
        }
      }
    } finally {
      if (interrupted) {
        Thread.currentThread().interrupt();
      }
    }
  }
}
