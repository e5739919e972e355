package io.consumerdedup.core.internal;

import static org.assertj.core.api.Assertions.assertThat;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.testing.StoreFixture;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.slf4j.LoggerFactory;

/**
 * A sweep of the SUCCESS marks parked for their threads' next claims that an {@code Error} ends
 * (the writer thread cannot start: the process may start no more threads), or that cannot be
 * scheduled, leaves no mark behind: the marks parked later are swept and written as before, the
 * mark it was handing over is written without waiting for another one, and the {@code Error} is
 * logged, or thrown to the caller that parked, rather than lost in the timer. Marks of threads that
 * never claim again, on a real PostgreSQL.
 */
class ParkedMarksAfterASweepErrorTest {
  @RegisterExtension static final StoreFixture db = new StoreFixture("sweep_error", 4);

  private static final Duration LEASE = Duration.ofMinutes(1);
  private static final Duration RETENTION = Duration.ofDays(1);
  private static final Duration WAIT = Duration.ofSeconds(10);

  private final ListAppender<ILoggingEvent> logged = new ListAppender<>();
  private final Logger writerLog = (Logger) LoggerFactory.getLogger(SuccessMarkWriter.class);
  private final List<AutoCloseable> closing = new ArrayList<>();

  /** Fails the first writer thread as {@code Thread.start()} fails at a thread limit. */
  private final AtomicInteger threadsRefused = new AtomicInteger();

  private final ThreadFactory firstThreadRefused =
      writing -> {
        if (threadsRefused.getAndIncrement() == 0) {
          throw new OutOfMemoryError("unable to create native thread: possibly out of memory");
        }
        return writerThread(writing);
      };

  private LeaseRenewer renewer;
  private PendingOutcomes pending;
  private SuccessMarkWriter marks;

  @BeforeEach
  void startRenewer() {
    logged.start();
    writerLog.addAppender(logged);
    renewer = new LeaseRenewer(db.store(), LEASE, Duration.ofSeconds(20), DedupListener.NOOP);
    closing.add(renewer);
    pending =
        new PendingOutcomes(
            db.store(), DedupListener.NOOP, renewer, RETENTION, RETENTION, Duration.ofMillis(200));
  }

  private void startWriter(SuccessMarkWriter.Timer timer, ThreadFactory writerThreads) {
    marks =
        new SuccessMarkWriter(
            db.store(), timer, pending, RETENTION, Duration.ofSeconds(5), writerThreads);
    closing.add(0, marks::close);
  }

  private static Thread writerThread(Runnable writing) {
    Thread thread = new Thread(writing, "consumer-dedup-outcome-writer");
    thread.setDaemon(true);
    return thread;
  }

  @AfterEach
  void stop() throws Exception {
    for (AutoCloseable each : closing) {
      each.close();
    }
    writerLog.detachAppender(logged);
  }

  @Test
  void aMarkParkedAfterTheErrorIsSweptAndWrittenAndTheErrorIsLogged() throws Exception {
    startWriter(renewer::after, firstThreadRefused);
    CompletableFuture<Void> first = parkOnItsOwnThread(successOf("before-error"));
    awaitTheSweepThatTheErrorEnded();

    CompletableFuture<Void> later = parkOnItsOwnThread(successOf("after-error"));

    // No thread claims again and nobody flushes: only a sweep brings the mark to a writer.
    assertThat(later).as("the SUCCESS parked after the Error").succeedsWithin(WAIT);
    assertThat(first).as("the SUCCESS the sweep was handing over").succeedsWithin(WAIT);
    assertThat(status("after-error")).isEqualTo(DedupStatus.SUCCESS);
    assertThat(status("before-error")).isEqualTo(DedupStatus.SUCCESS);
    assertThat(errorsLogged())
        .as("the sweep's Error, logged where it was met")
        .anySatisfy(
            event ->
                assertThat(event.getThrowableProxy().getMessage())
                    .startsWith("unable to create native thread"));
  }

  @Test
  void theMarkTheSweepWasHandingOverIsWrittenWithoutAnotherMarkParked() throws Exception {
    startWriter(renewer::after, firstThreadRefused);
    CompletableFuture<Void> alone = parkOnItsOwnThread(successOf("handed-over"));

    // Nothing else is parked or queued after the Error: no other mark starts a writer for it.
    assertThat(alone).as("the SUCCESS the sweep was handing over").succeedsWithin(WAIT);
    assertThat(threadsRefused)
        .as("a writer thread refused, a later one started")
        .hasValueGreaterThan(1);
    assertThat(status("handed-over")).isEqualTo(DedupStatus.SUCCESS);
  }

  @Test
  void aSweepThatCouldNotBeScheduledLeavesNoLaterMarkToItsThreadsNextClaim() throws Exception {
    AtomicInteger schedules = new AtomicInteger();
    startWriter(
        (delay, task) -> {
          if (schedules.getAndIncrement() == 0) {
            throw new OutOfMemoryError("Java heap space");
          }
          renewer.after(delay, task);
        },
        ParkedMarksAfterASweepErrorTest::writerThread);
    PendingOutcome refused = successOf("schedule-refused");
    CompletableFuture<Throwable> thrown = new CompletableFuture<>();
    Thread parking =
        new Thread(
            () -> {
              try {
                marks.park(refused);
                thrown.complete(null);
              } catch (Throwable e) {
                thrown.complete(e);
              }
            },
            "handler");
    parking.start();
    parking.join();
    assertThat(thrown.get()).as("the caller is told").isInstanceOf(OutOfMemoryError.class);

    CompletableFuture<Void> later = parkOnItsOwnThread(successOf("parked-later"));

    assertThat(later).as("the SUCCESS parked after the Error").succeedsWithin(WAIT);
    assertThat(refused.written).as("the SUCCESS whose sweep was refused").succeedsWithin(WAIT);
    assertThat(status("parked-later")).isEqualTo(DedupStatus.SUCCESS);
    assertThat(status("schedule-refused")).isEqualTo(DedupStatus.SUCCESS);
  }

  /** The sweep that met the refused writer thread is over: the timer ran a task after it. */
  private void awaitTheSweepThatTheErrorEnded() throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (threadsRefused.get() == 0 && System.nanoTime() < deadline) {
      Thread.sleep(5);
    }
    assertThat(threadsRefused).as("the sweep tried to start the writer").hasValueGreaterThan(0);
    CountDownLatch timerPassed = new CountDownLatch(1);
    renewer.after(Duration.ZERO, timerPassed::countDown);
    assertThat(timerPassed.await(10, TimeUnit.SECONDS)).isTrue();
  }

  private PendingOutcome successOf(String bizKey) {
    DedupKey key = DedupKey.of("payment", bizKey);
    long sent = System.nanoTime();
    ClaimResult.Claimed claim =
        (ClaimResult.Claimed)
            db.store().claim(new ClaimRequest(key, "sweep-test", LEASE, RETENTION, null, null));
    return PendingOutcome.success(
        key, claim.token(), null, renewer.start(claim, sent), Duration.ZERO);
  }

  /** Parks {@code mark} for the next claim of a thread that then ends without claiming again. */
  private CompletableFuture<Void> parkOnItsOwnThread(PendingOutcome mark)
      throws InterruptedException {
    Thread parking = new Thread(() -> marks.park(mark), "handler");
    parking.start();
    parking.join();
    return mark.written;
  }

  private List<ILoggingEvent> errorsLogged() {
    return logged.list.stream()
        .filter(event -> event.getLevel() == Level.ERROR && event.getThrowableProxy() != null)
        .toList();
  }

  private static DedupStatus status(String bizKey) {
    return db.store().find(DedupKey.of("payment", bizKey)).orElseThrow().status();
  }
}
