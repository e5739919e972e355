package io.consumerdedup.core.internal;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStoreUnavailableException;
import io.consumerdedup.testing.StoreFixture;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
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
 * (the writer thread cannot start: the process may start no more threads; the writer's queue cannot
 * take the mark: memory ran out), or that cannot be scheduled, leaves no mark behind: the marks
 * parked later are swept and written as before, the mark it was handing over is written without
 * waiting for another one, and the {@code Error} is logged, or thrown to the caller that parked,
 * rather than lost in the timer. So does a hand-over by the mark's own thread that the queue
 * refuses. Marks of threads that never claim again, on a real PostgreSQL.
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

  /** How many of the next marks the writer's queue refuses, as adding one does without memory. */
  private final AtomicInteger marksToRefuse = new AtomicInteger();

  private final BlockingQueue<PendingOutcome> refusingQueue =
      new LinkedBlockingQueue<>() {
        private static final long serialVersionUID = 1L;

        @Override
        public boolean offer(PendingOutcome mark) {
          if (marksToRefuse.getAndUpdate(left -> Math.max(0, left - 1)) > 0) {
            throw new OutOfMemoryError("Java heap space");
          }
          return super.offer(mark);
        }
      };

  /** The sweeps scheduled by a writer started with {@link #sweepsRunByTheTest}, not run yet. */
  private final List<Runnable> sweeps = new CopyOnWriteArrayList<>();

  private final SuccessMarkWriter.Timer sweepsRunByTheTest = (delay, sweep) -> sweeps.add(sweep);

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
            db.store(),
            timer,
            pending,
            RETENTION,
            Duration.ofSeconds(5),
            writerThreads,
            refusingQueue);
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

  /**
   * The writer's queue refuses the mark that a sweep hands over. Taken out of the parked marks
   * first, the mark was then in neither: its future never completed and its row stayed PROCESSING
   * while its lease was renewed, until its record was delivered again.
   */
  @Test
  void aMarkTheQueueRefusedAsTheSweepHandedItOverIsWrittenByALaterSweep() throws Exception {
    startWriter(renewer::after, ParkedMarksAfterASweepErrorTest::writerThread);
    marksToRefuse.set(1);

    CompletableFuture<Void> refused = parkOnItsOwnThread(successOf("refused-in-sweep"));

    assertThat(refused).as("the SUCCESS the queue refused at first").succeedsWithin(WAIT);
    assertThat(status("refused-in-sweep")).isEqualTo(DedupStatus.SUCCESS);
    assertThat(errorsLogged())
        .as("the sweep's Error, logged where it was met")
        .anySatisfy(
            event ->
                assertThat(event.getThrowableProxy().getMessage()).isEqualTo("Java heap space"));
  }

  /**
   * The mark's own thread hands it to the writer ({@code flushParked}, after the last record of a
   * batch) and the queue refuses it: the caller is told, and the mark stays parked, for the sweep.
   */
  @Test
  void aMarkTheQueueRefusedAsItsThreadFlushedItIsWrittenByTheSweep() throws Exception {
    startWriter(sweepsRunByTheTest, ParkedMarksAfterASweepErrorTest::writerThread);
    PendingOutcome flushed = successOf("refused-in-flush");
    CompletableFuture<Throwable> thrown =
        onItsOwnThread(
            () -> {
              marks.park(flushed);
              marksToRefuse.set(1);
              marks.flushParked();
            });
    assertThat(thrown.get()).as("the caller is told").isInstanceOf(OutOfMemoryError.class);

    runSweepsUntilWritten(flushed);

    assertThat(flushed.written).as("the SUCCESS the queue refused at first").succeedsWithin(WAIT);
    assertThat(status("refused-in-flush")).isEqualTo(DedupStatus.SUCCESS);
  }

  /**
   * The thread parks its next mark before any claim took the one before, whose place it takes; the
   * queue refuses the one before. It cannot go back to its place: it is kept for the background
   * retry (its future failed as not written yet, as after a failed write), and the newer mark is
   * swept as usual.
   */
  @Test
  void aMarkDisplacedByItsThreadsNextMarkThatTheQueueRefusedIsWrittenInTheBackground()
      throws Exception {
    startWriter(sweepsRunByTheTest, ParkedMarksAfterASweepErrorTest::writerThread);
    PendingOutcome displaced = successOf("displaced");
    PendingOutcome newer = successOf("displacing");
    CompletableFuture<Throwable> thrown =
        onItsOwnThread(
            () -> {
              marks.park(displaced);
              marksToRefuse.set(1);
              marks.park(newer);
            });

    runSweepsUntilWritten(newer);
    await()
        .atMost(WAIT)
        .alias("the displaced SUCCESS written by the background retry")
        .until(() -> status("displaced") == DedupStatus.SUCCESS);
    assertThat(displaced.written)
        .as("the displaced SUCCESS's future, failed as not written yet when it was kept")
        .failsWithin(Duration.ZERO)
        .withThrowableThat()
        .withCauseInstanceOf(DedupStoreUnavailableException.class);
    assertThat(thrown.get()).as("the newer mark parked, nothing thrown").isNull();
    assertThat(newer.written).as("the newer SUCCESS").succeedsWithin(WAIT);
    assertThat(status("displacing")).isEqualTo(DedupStatus.SUCCESS);
  }

  /**
   * A mark queued for the writer ({@code completeAsync}) when its thread cannot start: the mark was
   * queued, the Error thrown to the caller, and no writer came for it until another mark was
   * queued.
   */
  @Test
  void aMarkQueuedWhenNoWriterThreadCouldStartIsWrittenWithoutAnotherMark() throws Exception {
    startWriter(renewer::after, firstThreadRefused);
    PendingOutcome queued = successOf("queued-without-writer");

    CompletableFuture<Throwable> thrown = onItsOwnThread(() -> marks.queue(queued));

    assertThat(queued.written)
        .as("[what the caller's offset commit waits for] the SUCCESS queued with no writer")
        .succeedsWithin(WAIT);
    assertThat(status("queued-without-writer")).isEqualTo(DedupStatus.SUCCESS);
    assertThat(threadsRefused)
        .as("a writer thread refused, a later one started")
        .hasValueGreaterThan(1);
    assertThat(thrown.get()).as("the mark queued: nothing thrown to the caller").isNull();
    assertThat(errorsLogged())
        .as("the Error, logged")
        .anySatisfy(
            event ->
                assertThat(event.getThrowableProxy().getMessage())
                    .startsWith("unable to create native thread"));
  }

  /**
   * A mark handed to the writer ({@code completeAsync}) when no writer thread can start and no
   * sweep can be scheduled to start one later either. The Error was thrown to the caller, whose
   * claim took the mark for handed over (it is listed as on its way), while the mark sat in the
   * queue with no writer: its future incomplete (an offset commit waiting for it) and its key
   * PROCESSING under a lease renewed, until some later mark happened to start a writer. It is
   * written on the caller's thread instead, as once the executor is closed.
   */
  @Test
  void aMarkQueuedWhenNeitherAWriterNorASweepCanStartIsWrittenOnTheCallersThread()
      throws Exception {
    AtomicInteger sweepsRefused = new AtomicInteger();
    startWriter(
        (delay, sweep) -> {
          sweepsRefused.incrementAndGet();
          throw new OutOfMemoryError("Java heap space");
        },
        writing -> {
          threadsRefused.incrementAndGet();
          throw new OutOfMemoryError("unable to create native thread: possibly out of memory");
        });
    PendingOutcome queued = successOf("no-writer-no-sweep");

    CompletableFuture<Throwable> thrown =
        onItsOwnThread(
            () -> {
              pending.add(queued);
              marks.queue(queued);
            });

    assertThat(threadsRefused).as("writer threads refused").hasValue(1);
    assertThat(sweepsRefused).as("sweeps refused").hasValue(1);
    assertThat(queued.written.isDone())
        .as("[what the caller's offset commit waits for] the SUCCESS's future, completed")
        .isTrue();
    assertThat(queued.written).succeedsWithin(Duration.ZERO);
    assertThat(status("no-writer-no-sweep")).isEqualTo(DedupStatus.SUCCESS);
    assertThat(thrown.get()).as("the mark written: nothing thrown to the caller").isNull();
    assertThat(pending.contains(queued.key)).as("still listed as on its way").isFalse();
    assertThat(errorsLogged())
        .as("the Error, logged")
        .anySatisfy(
            event ->
                assertThat(event.getThrowableProxy().getMessage())
                    .startsWith("unable to create native thread"));
  }

  /**
   * A mark taken back from a queue with no writer and no sweep, whose write on the caller's thread
   * meets an {@code OutOfMemoryError} before the store call (as its lists are built). Thrown to the
   * caller, whose claim took the mark for handed over (it is listed as on its way), the mark was in
   * no queue, not kept and not retried: its future incomplete and its key PROCESSING under a lease
   * renewed for good. It is kept for the background retry instead, as after a failed write.
   */
  @Test
  void aMarkWhoseWriteOnTheCallersThreadMeetsAnErrorIsWrittenInTheBackground() throws Exception {
    startWriter(
        (delay, sweep) -> {
          throw new OutOfMemoryError("Java heap space");
        },
        writing -> {
          threadsRefused.incrementAndGet();
          throw new OutOfMemoryError("unable to create native thread: possibly out of memory");
        });
    PendingOutcome queued = successOf("caller-write-struck");
    AtomicInteger struck = new AtomicInteger();
    FaultPoints.install(
        point -> {
          if (point == FaultPoints.Point.SUCCESS_MARKS_TAKEN && struck.getAndIncrement() == 0) {
            throw new OutOfMemoryError("Java heap space");
          }
        });
    CompletableFuture<Throwable> thrown;
    try {
      thrown =
          onItsOwnThread(
              () -> {
                pending.add(queued);
                marks.queue(queued);
              });
    } finally {
      FaultPoints.install(null);
    }

    assertThat(struck).as("the caller's write struck").hasValue(1);
    assertThat(queued.written.isDone())
        .as("[what the caller's offset commit waits for] the SUCCESS's future, completed")
        .isTrue();
    assertThat(queued.written)
        .as("the SUCCESS's future, failed as not written yet when it was kept")
        .failsWithin(Duration.ZERO)
        .withThrowableThat()
        .withCauseInstanceOf(DedupStoreUnavailableException.class);
    assertThat(thrown.get()).as("the mark kept, nothing thrown to the caller").isNull();
    await()
        .atMost(WAIT)
        .alias("the struck SUCCESS written by the background retry")
        .until(() -> status("caller-write-struck") == DedupStatus.SUCCESS);
    await()
        .atMost(WAIT)
        .alias("no longer listed as on its way")
        .until(() -> !pending.contains(queued.key));
  }

  /**
   * No writer thread can start and no sweep can be scheduled, each failing with the same {@code
   * OutOfMemoryError} (the JVM throws its one preallocated instance once it cannot build another).
   * Added to itself as suppressed it became an {@code IllegalArgumentException} ("Self-suppression
   * not permitted") thrown to the caller, with the mark left queued and no writer to take it. It is
   * written on the caller's thread, as with two different Errors, and the Error is logged.
   */
  @Test
  void aMarkWhoseWriterAndSweepFailWithTheSameErrorIsWrittenOnTheCallersThread() throws Exception {
    OutOfMemoryError preallocated = new OutOfMemoryError("unable to create native thread");
    startWriter(
        (delay, sweep) -> {
          throw preallocated;
        },
        writing -> {
          threadsRefused.incrementAndGet();
          throw preallocated;
        });
    PendingOutcome queued = successOf("same-error-twice");

    CompletableFuture<Throwable> thrown =
        onItsOwnThread(
            () -> {
              pending.add(queued);
              marks.queue(queued);
            });

    assertThat(threadsRefused).as("writer threads refused").hasValue(1);
    assertThat(thrown.get()).as("the mark written: nothing thrown to the caller").isNull();
    assertThat(queued.written).succeedsWithin(Duration.ZERO);
    assertThat(status("same-error-twice")).isEqualTo(DedupStatus.SUCCESS);
    assertThat(errorsLogged())
        .as("the Error, logged")
        .anySatisfy(
            event ->
                assertThat(event.getThrowableProxy().getMessage())
                    .startsWith("unable to create native thread"));
  }

  /**
   * The executor closes while a mark is being written on its caller's thread (no writer thread
   * could start). The close gave the mark up, as one not on its way: an ERROR said its SUCCESS was
   * not recorded and its future failed as closed before written, and the write then recorded it.
   * The close leaves it to its write, as it leaves the writer thread's marks.
   */
  @Test
  void aCloseDuringTheWriteOnTheCallersThreadLeavesTheMarkToThatWrite() throws Exception {
    startWriter(
        (delay, sweep) -> {
          throw new OutOfMemoryError("Java heap space");
        },
        writing -> {
          throw new OutOfMemoryError("unable to create native thread: possibly out of memory");
        });
    PendingOutcome queued = successOf("closed-while-caller-writes");
    CountDownLatch writing = new CountDownLatch(1);
    CountDownLatch closed = new CountDownLatch(1);
    FaultPoints.install(
        point -> {
          if (point == FaultPoints.Point.BEFORE_SUCCESS_MARK && writing.getCount() > 0) {
            writing.countDown();
            try {
              closed.await(10, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
              Thread.currentThread().interrupt();
            }
          }
        });
    Thread handler =
        new Thread(
            () -> {
              pending.add(queued);
              marks.queue(queued);
            },
            "handler");
    try {
      handler.start();
      assertThat(writing.await(10, TimeUnit.SECONDS)).as("the caller's write begun").isTrue();
      // As Outcomes.close() closes.
      pending.stopKeeping();
      pending.giveUp(marks.close());
    } finally {
      closed.countDown();
      handler.join(WAIT.toMillis());
      FaultPoints.install(null);
    }

    assertThat(queued.written)
        .as("[what the caller's offset commit waits for] the SUCCESS's future")
        .succeedsWithin(WAIT);
    assertThat(status("closed-while-caller-writes")).isEqualTo(DedupStatus.SUCCESS);
  }

  /**
   * A mark handed to the writer ({@code completeAsync}, as {@code Outcomes.completeLater} hands it:
   * noted as on its way, then queued) that the queue refuses (an {@code OutOfMemoryError} as it
   * allocates its node). The Error went to the caller, whose claim was ended already: the mark was
   * in no queue and nothing retried it, its row PROCESSING under a lease renewed for as long as the
   * executor ran (another consumer told "in progress" all along). It is kept for the background
   * retry instead, its future failed as not written yet, as after a failed write.
   */
  @Test
  void aMarkTheQueueRefusedAsItWasHandedToTheWriterIsWrittenInTheBackground() throws Exception {
    startWriter(renewer::after, ParkedMarksAfterASweepErrorTest::writerThread);
    PendingOutcome refused = successOf("refused-in-queue");
    marksToRefuse.set(1);

    CompletableFuture<Throwable> thrown =
        onItsOwnThread(
            () -> {
              pending.add(refused);
              marks.queue(refused);
            });

    assertThat(marksToRefuse).as("the queue refused the mark").hasValue(0);
    await()
        .atMost(WAIT)
        .alias("the refused SUCCESS written without another mark or claim of its key")
        .until(() -> status("refused-in-queue") == DedupStatus.SUCCESS);
    assertThat(refused.written)
        .as("the refused SUCCESS's future, failed as not written yet when it was kept")
        .failsWithin(Duration.ZERO)
        .withThrowableThat()
        .withCauseInstanceOf(DedupStoreUnavailableException.class);
    assertThat(thrown.get()).as("the mark kept, nothing thrown to the caller").isNull();
    // The background retry unlists the mark after its write commits, not with it.
    await()
        .atMost(WAIT)
        .alias("no longer listed as on its way")
        .until(() -> !pending.contains(refused.key));
  }

  /**
   * While no writer thread can start, every mark a handler queues meets the Error. Each one logged
   * it at ERROR with its stack trace: a consumer at a thousand records a second wrote a thousand
   * such lines a second, at the very moment the process was short of resources, for one cause that
   * one pending sweep was already retrying. Now said once per sweep, and every mark still written
   * once a writer starts.
   */
  @Test
  void marksQueuedWhileNoWriterThreadCanStartLogTheErrorOncePerSweepAndAreAllWritten()
      throws Exception {
    AtomicInteger refusing = new AtomicInteger(1);
    startWriter(
        sweepsRunByTheTest,
        writing -> {
          if (refusing.get() == 1) {
            threadsRefused.incrementAndGet();
            throw new OutOfMemoryError("unable to create native thread: possibly out of memory");
          }
          return writerThread(writing);
        });
    List<PendingOutcome> queued = new ArrayList<>();
    for (int i = 0; i < 20; i++) {
      PendingOutcome mark = successOf("queued-" + i);
      queued.add(mark);
      assertThat(onItsOwnThread(() -> marks.queue(mark)).get())
          .as("nothing thrown to the caller")
          .isNull();
    }
    assertThat(threadsRefused).as("a writer refused for every mark").hasValue(20);
    assertThat(errorsLogged())
        .as("[the log] ERROR lines for 20 marks queued while no writer could start")
        .hasSize(1);

    refusing.set(0);
    runSweepsUntilWritten(queued.get(queued.size() - 1));
    for (PendingOutcome mark : queued) {
      assertThat(mark.written).as("[the offset commit's wait] %s", mark.key).succeedsWithin(WAIT);
      assertThat(status(mark.key.bizKey())).isEqualTo(DedupStatus.SUCCESS);
    }
  }

  /** Runs the sweeps scheduled, as the timer would, until {@code mark} is written. */
  private void runSweepsUntilWritten(PendingOutcome mark) {
    await()
        .atMost(WAIT)
        .alias("the swept SUCCESS written")
        .until(
            () -> {
              for (Runnable sweep : sweeps) {
                sweeps.remove(sweep);
                sweep.run();
              }
              return mark.written.isDone();
            });
  }

  /** What {@code parking} threw on a thread of its own that then ends; null if nothing. */
  private static CompletableFuture<Throwable> onItsOwnThread(Runnable parking)
      throws InterruptedException {
    CompletableFuture<Throwable> thrown = new CompletableFuture<>();
    Thread thread =
        new Thread(
            () -> {
              try {
                parking.run();
                thrown.complete(null);
              } catch (Throwable e) {
                thrown.complete(e);
              }
            },
            "handler");
    thread.start();
    thread.join();
    return thrown;
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
