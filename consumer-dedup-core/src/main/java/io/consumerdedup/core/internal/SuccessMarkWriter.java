package io.consumerdedup.core.internal;

import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.DedupStoreException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.atomic.AtomicBoolean;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Writes SUCCESS marks grouped: a writer thread sends as many as are queued in one store call, so
 * the callers go on to their next records while the marks are written. A mark parked for the next
 * claim of its thread ({@link #park}) rides with that claim instead, or goes to the writer thread
 * if no claim comes soon. Each mark ends settled or kept through {@link PendingOutcomes}.
 */
final class SuccessMarkWriter {
  private static final Logger log = LoggerFactory.getLogger(SuccessMarkWriter.class);

  /** A poll's worth of marks, and a bound on the statement's arrays. */
  private static final int MAX_MARKS_PER_WRITE = 1000;

  /**
   * How long a SUCCESS mark waits for the next claim of its thread ({@link #park}) before the
   * writer thread writes it on its own: a record's claim follows the previous record's handler at
   * once, unless the poll has ended.
   */
  private static final Duration PARKED_MARK_WAIT = Duration.ofMillis(5);

  /** When a sweep that failed ({@link #sweepParked}) is tried again. */
  private static final Duration SWEEP_AGAIN_AFTER_FAILURE = Duration.ofMillis(100);

  private final DedupStore store;
  private final Timer timer;
  private final PendingOutcomes pending;
  private final Duration successRetention;
  private final Duration closeWait;
  private final ThreadFactory writerThreads;
  private final BlockingQueue<PendingOutcome> marks;

  /** Per thread, the SUCCESS mark that waits to be written with the thread's next claim. */
  private final Map<Thread, PendingOutcome> parked;

  /** Whether a sweep of the parked marks is scheduled ({@link #sweepParked}). */
  private final AtomicBoolean sweepPending = new AtomicBoolean();

  /** Sweeps ended by a failure since the last that was not; read and written by sweeps only. */
  private int sweepsFailedInARow;

  private @Nullable Thread writer; // guarded by marks
  private volatile boolean closed; // set under marks
  private boolean writing; // guarded by marks

  /** The marks of the write on its way, while {@link #writing}. Guarded by marks. */
  private List<PendingOutcome> beingWritten = List.of();

  /**
   * @param closeWait how long {@link #close()} waits for the writer thread to end
   */
  SuccessMarkWriter(
      DedupStore store,
      LeaseRenewer renewer,
      PendingOutcomes pending,
      Duration successRetention,
      Duration closeWait) {
    this(
        store,
        renewer::after,
        pending,
        successRetention,
        closeWait,
        SuccessMarkWriter::writerThread,
        new LinkedBlockingQueue<>());
  }

  /**
   * @param timer schedules the sweeps of the parked marks (a test's may throw, as scheduling does
   *     when memory runs out)
   * @param writerThreads makes the writer thread, not started (a test's may throw, as {@link
   *     Thread#start()} does once the process may start no more threads)
   * @param marks the writer thread's queue, empty (a test's may refuse a mark, as adding one does
   *     when memory runs out)
   */
  SuccessMarkWriter(
      DedupStore store,
      Timer timer,
      PendingOutcomes pending,
      Duration successRetention,
      Duration closeWait,
      ThreadFactory writerThreads,
      BlockingQueue<PendingOutcome> marks) {
    this(
        store,
        timer,
        pending,
        successRetention,
        closeWait,
        writerThreads,
        marks,
        new ConcurrentHashMap<>());
  }

  /**
   * As above, with {@code parked} the marks left for their threads' next claims, empty (a test's
   * may refuse one, as putting it does when memory runs out).
   */
  SuccessMarkWriter(
      DedupStore store,
      Timer timer,
      PendingOutcomes pending,
      Duration successRetention,
      Duration closeWait,
      ThreadFactory writerThreads,
      BlockingQueue<PendingOutcome> marks,
      Map<Thread, PendingOutcome> parked) {
    this.parked = parked;
    this.store = store;
    this.timer = timer;
    this.pending = pending;
    this.successRetention = successRetention;
    this.closeWait = closeWait;
    this.writerThreads = writerThreads;
    this.marks = marks;
  }

  /** Runs a quick task once after a delay ({@link LeaseRenewer#after}). */
  @FunctionalInterface
  interface Timer {
    /**
     * @throws RejectedExecutionException the timer is closed
     */
    void after(Duration delay, Runnable task);
  }

  private static Thread writerThread(Runnable writing) {
    Thread thread = new Thread(writing, "consumer-dedup-outcome-writer");
    thread.setDaemon(true);
    return thread;
  }

  /**
   * Hands {@code outcome} to the writer thread; once closed, or when neither a writer thread nor a
   * sweep to start one can start, writes it on the calling thread. A mark the queue refuses (an
   * OutOfMemoryError as it allocates) is kept for the background retry, its future failed as not
   * written yet, as after a failed write: thrown to the caller, whose claim had ended, it was in no
   * queue and nothing retried it, its key PROCESSING under a lease renewed for as long as the
   * executor ran.
   */
  void queue(PendingOutcome outcome) {
    Throwable refused = null;
    Throwable noWriter = null;
    synchronized (marks) {
      if (!closed) {
        try {
          marks.add(outcome);
        } catch (RuntimeException | Error e) {
          refused = e;
        }
        if (refused == null) {
          try {
            startWriterIfGone();
            return;
          } catch (RuntimeException | Error e) {
            if (sweepForAWriter(e)) {
              return;
            }
            // No writer thread, and no sweep to start one: nothing would take the mark from the
            // queue. Thrown to the caller, whose claim took the mark for handed over (it is listed
            // as on its way), it stayed queued with its future incomplete until a later mark
            // started a writer: none, once the stream went quiet. Taken back (nobody else takes
            // from the queue while this lock is held and no writer runs) and written below.
            if (!marks.remove(outcome)) {
              throw e;
            }
            noWriter = e;
          }
        }
      }
    }
    if (refused != null) {
      failedUnexpectedly(List.of(outcome), refused); // outside the lock: it tells the listener
      return;
    }
    // Closed, or no writer can start: one write now, on the caller's thread, rather than none.
    writeOnThisThread(outcome);
    if (noWriter != null) {
      try {
        log.error(
            "Could not start the writer thread of the SUCCESS marks, nor schedule another try;"
                + " wrote the SUCCESS of {} on the calling thread",
            DeliverySources.where(outcome.key, outcome.source),
            noWriter);
      } catch (RuntimeException | Error unlogged) {
        // The mark is written or kept all the same; the next mark tries a writer again.
      }
    }
  }

  /**
   * Writes {@code outcome}, queued after the close or taken back from a queue with no writer, on
   * the calling thread. Whatever the write throws, an Error included (an OutOfMemoryError as its
   * lists are built, before the store call), the mark ends written, or kept for the background
   * retry with its future failed, as after a failed write: thrown to the caller, whose claim took
   * the mark for handed over (it is listed as on its way), it was in no queue, not kept and not
   * retried, its future incomplete and its key PROCESSING under a lease renewed for good.
   */
  private void writeOnThisThread(PendingOutcome outcome) {
    // Taken as a background retry takes it, and as the writer thread's write is listed: a close
    // meanwhile gives up every outcome still listed but those whose write is on its way. Given up
    // under this write, the mark was said at ERROR to be not recorded and its future failed, and
    // the write then recorded it. A write that took it first (a redelivery's) goes along, fenced.
    boolean taken = outcome.retrying.compareAndSet(false, true);
    try {
      FaultPoints.reached(FaultPoints.Point.SUCCESS_MARKS_TAKEN);
      writeMarks(List.of(outcome));
    } catch (RuntimeException | Error e) {
      failedUnexpectedly(List.of(outcome), e);
    } finally {
      if (taken) {
        outcome.retrying.set(false);
      }
    }
  }

  /**
   * The writer thread could not start ({@code e}, "unable to create native thread") for a mark
   * queued already: a sweep starts one shortly, and again until one starts. Thrown to the caller
   * instead, the mark stayed queued with no writer, its future incomplete (the caller's offset
   * commit waiting for it) until some later mark started one: none, once the stream went quiet.
   * False if no sweep can be scheduled either: then {@link #queue} writes the mark itself. Under
   * the lock of {@link #marks}: a sweep already pending has not looked at the queue yet, and starts
   * a writer for it.
   */
  private boolean sweepForAWriter(Throwable e) {
    if (!sweepPending.compareAndSet(false, true)) {
      // The sweep pending starts a writer, and says so if it cannot. Logged here too, while no
      // thread could start every mark of every handler wrote an ERROR and its stack trace.
      return true;
    }
    try {
      timer.after(SWEEP_AGAIN_AFTER_FAILURE, this::sweepParked);
    } catch (RuntimeException | Error notScheduled) {
      sweepPending.set(false);
      // Both may be the JVM's one preallocated OutOfMemoryError: added to itself, it threw an
      // IllegalArgumentException ("Self-suppression not permitted") to the caller, the mark left
      // queued with no writer to take it, its future incomplete and its key PROCESSING.
      FirstFailure.of(e, notScheduled);
      return false;
    }
    log.error(
        "Could not start the writer thread of the SUCCESS marks; trying again in {} ms",
        SWEEP_AGAIN_AFTER_FAILURE.toMillis(),
        e);
    return true;
  }

  /**
   * Starts a writer thread unless one runs. Guarded by {@link #marks}. A writer that died (an Error
   * escaped it) is replaced; the marks it left queued are its successor's. Marks it had taken were
   * settled or kept before it died. A writer that could not start is tried again by the next call.
   */
  private void startWriterIfGone() {
    Thread current = writer;
    if (current == null || !current.isAlive()) {
      writer = writerThreads.newThread(this::writeQueuedMarks);
      writer.start();
    }
  }

  /**
   * Leaves {@code outcome} for the next claim of the calling thread ({@link #takeParked}). If the
   * thread sends none within {@link #PARKED_MARK_WAIT}, or parks another mark first, or {@link
   * #flushParked()} is called, it is queued for the writer thread.
   */
  void park(PendingOutcome outcome) {
    Thread thread = Thread.currentThread();
    outcome.parkedUntilNanos = System.nanoTime() + PARKED_MARK_WAIT.toNanos();
    PendingOutcome earlier;
    try {
      earlier = parked.put(thread, outcome);
    } catch (RuntimeException | Error e) {
      // Such as an OutOfMemoryError as the entry is allocated. Thrown to the caller, the mark,
      // listed as on its way, was parked nowhere and queued nowhere: its claim took it for handed
      // over, nothing wrote it, and its lease was renewed for the executor's life. To the writer
      // thread instead, which keeps it for retrying if even that refuses it.
      queue(outcome);
      return;
    }
    if (earlier != null) {
      queueDisplaced(earlier); // no claim came between the two
    }
    if (!closed) {
      // One sweep pending at a time, not a timer task per mark: a task per mark woke the timer
      // thread for every record (each became the head of its queue) and was cancelled by the
      // next claim a moment later, a thread hand-off per record on the path it was meant to
      // spare. The sweep finds the mark by its time, as the task did.
      if (sweepPending.get() || !sweepPending.compareAndSet(false, true)) {
        return;
      }
      try {
        timer.after(PARKED_MARK_WAIT, this::sweepParked);
        return;
      } catch (RejectedExecutionException e) {
        sweepPending.set(false); // closed meanwhile: no timer any more
      } catch (RuntimeException | Error e) {
        // Such as an OutOfMemoryError as the sweep is scheduled. Left set, the flag kept every
        // later park() from scheduling one, and each mark waited for its thread's next claim.
        sweepPending.set(false);
        try {
          flushParked(); // no sweep comes for this one
        } catch (RuntimeException | Error flushFailed) {
          if (flushFailed != e) {
            e.addSuppressed(flushFailed);
          }
        }
        throw e;
      }
    }
    flushParked(); // closed: written now, on this thread
  }

  /**
   * On the timer thread: queues the parked marks whose wait is over, and comes back when the next
   * one's is. A mark parked while this runs is seen by this sweep or schedules the next itself.
   */
  private void sweepParked() {
    Throwable failure = null;
    synchronized (marks) {
      // Only while not closed, decided under the lock on which close() closes: once closed,
      // queue() writes on the calling thread, here the lease timer, which close() then interrupts;
      // the write failed (a false ERROR, the key PROCESSING for a whole lease) while close() gave
      // the mark up. Left parked, close() collects it and writes it on its own thread.
      if (closed) {
        return;
      }
      long now = System.nanoTime();
      try {
        if (!marks.isEmpty()) {
          startWriterIfGone(); // marks queued by a sweep whose writer thread could not start
        }
        parked.forEach(
            (thread, mark) -> {
              if (mark.parkedUntilNanos - now <= 0) {
                handOver(thread, mark);
              }
            });
      } catch (RuntimeException | Error e) {
        // Such as a writer thread that could not start ("unable to create native thread"). Thrown
        // on, the timer kept it in a future nobody reads: not a word in the log, the mark being
        // handed over queued with no writer and the marks after it left parked, each until some
        // later mark happened to start a writer or its thread claimed again.
        failure = e;
      } finally {
        // Also after an Error: the next park() schedules a sweep again, where a flag left set
        // would leave every later mark to its next claim.
        sweepPending.set(false);
      }
    }
    long next = Long.MAX_VALUE;
    if (failure != null) {
      if (sweepsFailedInARow++ == 0) { // once per streak: one try every SWEEP_AGAIN_AFTER_FAILURE
        log.error(
            "Handing the SUCCESS marks parked for their threads' next claims to the outcome writer"
                + " failed; trying again every {} ms until it succeeds",
            SWEEP_AGAIN_AFTER_FAILURE.toMillis(),
            failure);
      }
      next = SWEEP_AGAIN_AFTER_FAILURE.toNanos(); // not at once: the cause may last a while
    } else {
      sweepsFailedInARow = 0;
      for (PendingOutcome mark : parked.values()) {
        next = Math.min(next, Math.max(0, mark.parkedUntilNanos - System.nanoTime()));
      }
    }
    if (next != Long.MAX_VALUE && sweepPending.compareAndSet(false, true)) {
      try {
        timer.after(Duration.ofNanos(next), this::sweepParked);
      } catch (RejectedExecutionException e) {
        sweepPending.set(false); // closed: close() collects the parked marks
      } catch (RuntimeException | Error e) {
        // Not left set, as in park(): the next park() schedules a sweep, which takes these too.
        sweepPending.set(false);
        log.error("Could not schedule the next sweep of the parked SUCCESS marks", e);
      }
    }
  }

  /** Hands the calling thread's mark that waits for its next claim to the writer thread now. */
  void flushParked() {
    Thread thread = Thread.currentThread();
    PendingOutcome mark = parked.get(thread);
    if (mark == null) {
      return;
    }
    synchronized (marks) {
      if (!closed) {
        handOver(thread, mark);
        return;
      }
    }
    // Closed: written now, on this thread, as queue() does; unless close() took it first.
    if (parked.remove(thread, mark)) {
      writeMarks(List.of(mark));
    }
  }

  /**
   * Moves {@code mark}, parked for {@code thread}, to the writer thread's queue, unless it is no
   * longer parked there (its thread took it for a claim, or parked another). Called under the lock
   * of {@link #marks}, not closed. The mark leaves {@link #parked} only once it is queued: taken
   * out first, a mark whose queuing threw (an OutOfMemoryError as the queue allocated its node) was
   * in neither, its future never completed, its lease renewed until the executor closed, and only a
   * delivery of its record again wrote it. Left parked, the next sweep, its thread's next claim or
   * close() finds it. Atomic with its thread's {@link #takeParked} and {@link #park}, and with
   * close()'s collection: the map's lock on the thread's entry is held while the mark is queued.
   */
  private void handOver(Thread thread, PendingOutcome mark) {
    parked.computeIfPresent(
        thread,
        (owner, current) -> {
          if (current != mark) {
            return current;
          }
          marks.add(mark); // throwing, leaves the mapping as it was
          return null;
        });
    if (!marks.isEmpty()) {
      startWriterIfGone();
    }
  }

  /**
   * Queues {@code earlier}, whose place in {@link #parked} a newer mark of its thread took. It
   * cannot go back there: one the queue refuses is kept for the background retry by {@link #queue}
   * (its future failed as not written yet, as after a failed write), and so is one that is not
   * queued after anything else {@code queue} throws, rather than lost. Not thrown on either: {@link
   * #park} goes on to schedule the sweep of the newer mark, which also starts a writer for one
   * queued while none could start.
   */
  private void queueDisplaced(PendingOutcome earlier) {
    try {
      queue(earlier);
    } catch (RuntimeException | Error e) {
      if (marks.contains(earlier)) {
        log.error(
            "Could not start the writer thread of the SUCCESS marks; the next sweep tries again",
            e);
      } else {
        failedUnexpectedly(List.of(earlier), e);
      }
    }
  }

  /**
   * The SUCCESS mark that the calling thread left for its next claim, taken for the claim of {@code
   * claimed}; null if there is none, or it is of the same key (written first then, as any pending
   * outcome of the key).
   */
  @Nullable PendingOutcome takeParked(DedupKey claimed) {
    if (parked.isEmpty()) {
      return null;
    }
    Thread thread = Thread.currentThread();
    PendingOutcome mark = parked.get(thread);
    if (mark == null || mark.key.equals(claimed) || !parked.remove(thread, mark)) {
      return null;
    }
    return mark.settled.get() ? null : mark;
  }

  /**
   * Writes the queued SUCCESS marks, as many as are queued at once in one store call: while one
   * call is on its way, the marks of the next records gather for the next one. Runs until closed;
   * the marks queued then are written by {@link #close()}.
   */
  private void writeQueuedMarks() {
    // Sized for the largest group, so that adding a taken mark cannot fail on an allocation.
    List<PendingOutcome> group = new ArrayList<>(MAX_MARKS_PER_WRITE);
    while (!closed) {
      try {
        group.add(marks.take());
      } catch (InterruptedException e) {
        // close() wakes an idle writer so, once closed is set. Any other interrupt is no stop:
        // the application's listener, told of a SUCCESS on this thread, may leave the flag set.
        // Ended on it, the writer left the marks queued meanwhile with no writer until another
        // mark came: after the last record before a quiet spell, its future never completed.
        continue;
      }
      try {
        marks.drainTo(group, MAX_MARKS_PER_WRITE - 1);
        FaultPoints.reached(FaultPoints.Point.SUCCESS_MARKS_TAKEN);
        synchronized (marks) {
          writing = true;
          beingWritten = group; // not changed until the write is over
          // close() may have woken this thread after take() had returned the marks: that
          // interrupt was for an idle writer, and left set it failed the write at once (a pool
          // that has to wait for a connection throws on it), so marks taken were given up, their
          // keys left PROCESSING until their leases ran out. From here on close() does not
          // interrupt.
          Thread.interrupted();
        }
        writeMarks(group);
      } catch (RuntimeException | Error e) {
        // Such as an OutOfMemoryError before the write began: escaping, it ended this thread with
        // the marks it had taken neither written nor kept, their futures never completed (a poll
        // waiting for them waited for good) and their keys PROCESSING while their leases were
        // renewed. Kept as after a failed write, and this thread goes on with the next marks.
        failedUnexpectedly(group, e);
      } finally {
        synchronized (marks) {
          writing = false;
          beingWritten = List.of();
        }
        group.clear();
      }
    }
  }

  /**
   * Writes the marks in one store call (one per attempt of a key named twice). Whatever a call
   * throws, an Error included, each mark ends written, lost, or kept for the background retry with
   * its future failed: none is dropped, and no waiter waits on a future that nobody completes.
   */
  private void writeMarks(List<PendingOutcome> group) {
    List<PendingOutcome> open = group.stream().filter(outcome -> !outcome.settled.get()).toList();
    for (List<PendingOutcome> call : onePerKey(open)) {
      writeEach(call);
    }
  }

  /**
   * {@code open} split so that no store call names a key twice. Two attempts of one key (the first
   * one's lease ran out while its handler ran, and this process claimed the key again) can be
   * queued together, and the store answers for keys, not attempts: the key answered as written, the
   * stale attempt, refused, was settled as written too, its lease loss (a handler run twice) never
   * told and a second SUCCESS of the key counted.
   */
  private static List<List<PendingOutcome>> onePerKey(List<PendingOutcome> open) {
    if (open.isEmpty()) {
      return List.of();
    }
    Map<DedupKey, Integer> named = new HashMap<>();
    List<List<PendingOutcome>> calls = new ArrayList<>();
    for (PendingOutcome outcome : open) {
      int call = named.merge(outcome.key, 1, Integer::sum) - 1;
      if (call == calls.size()) {
        calls.add(new ArrayList<>());
      }
      calls.get(call).add(outcome);
    }
    return calls;
  }

  /** One store call for {@code open}, whose keys are distinct; as {@link #writeMarks}. */
  private void writeEach(List<PendingOutcome> open) {
    List<ClaimResult.Claimed> claims =
        open.stream().map(outcome -> outcome.renewal.claim()).toList();
    try {
      FaultPoints.reached(FaultPoints.Point.BEFORE_SUCCESS_MARK);
      Set<DedupKey> lost = new HashSet<>(store.completeAll(claims, successRetention));
      FaultPoints.reached(FaultPoints.Point.AFTER_SUCCESS_MARK);
      settleAll(open, lost);
    } catch (DedupStoreException e) {
      if (pending.notWritten(open, e)) {
        log.warn(
            "Handlers for {} succeeded, but SUCCESS could not be recorded yet; keeping the leases"
                + " and retrying in the background: {}",
            open.stream()
                .map(outcome -> DeliverySources.where(outcome.key, outcome.source))
                .toList(),
            e.getMessage());
      }
    } catch (RuntimeException | Error e) {
      // An Error too (an OutOfMemoryError from getConnection): the writer lives on, and the
      // outcomes are retried like those of an outage.
      failedUnexpectedly(open, e);
    }
  }

  /** Keeps the marks of {@code group} not settled yet, after {@code e}, as after a failed write. */
  private void failedUnexpectedly(List<PendingOutcome> group, Throwable e) {
    // Described safely: a failure whose toString() throws ended the writer with the marks it took.
    boolean kept =
        pending.notWritten(group, new DedupStoreException(FailureTexts.describe(e), null, null, e));
    log.error(
        kept
            ? "Writing SUCCESS marks failed unexpectedly; retrying in the background"
            : "Writing SUCCESS marks failed unexpectedly",
        FailureTexts.loggable(e));
  }

  /**
   * Settles each mark of a write that answered, whatever settling one of them throws (the
   * application's listener, told of each, throwing an Error): the marks after it were written too,
   * and failing their futures as not written would hold their records back for nothing. What was
   * thrown is logged, as the writer logs whatever else it meets, and the writer goes on.
   */
  private void settleAll(List<PendingOutcome> open, Set<DedupKey> lost) {
    Throwable failure = null;
    for (PendingOutcome outcome : open) {
      try {
        pending.settle(outcome, !lost.contains(outcome.key));
      } catch (RuntimeException | Error e) {
        if (failure == null) {
          failure = e;
        } else {
          failure.addSuppressed(e);
        }
      }
    }
    if (failure != null) {
      // Not the write's failure: the marks are written and settled, nothing is retried. Through a
      // stand-in: an Error whose getMessage() throws threw out of this line, and the writer then
      // reported the written marks as a failed write, "retrying in the background".
      log.error(
          "Settling written SUCCESS marks failed (the listener threw)",
          FailureTexts.loggable(failure));
    }
  }

  /**
   * Stops the writer thread and writes the marks still queued or parked, once. The caller's
   * interrupt (an application stopping on an interrupted thread) is set aside meanwhile and set
   * again after: left set, it cut the wait for the writer's marks in flight short, and the write of
   * the marks still queued failed on it at once (a pool that has to wait for a connection throws on
   * it), so marks whose handlers had run were given up, their keys left PROCESSING and their
   * records delivered again, though the database was up.
   *
   * @return the marks of a write still on its way once the wait for the writer is over: that write
   *     settles them (written, or given up if it fails), however long it takes. Given up by the
   *     close instead, they were reported not recorded (their futures failed, an ERROR each) while
   *     the write then recorded them, and a poll's commit held their records back for nothing.
   */
  List<PendingOutcome> close() {
    boolean interrupted = Thread.interrupted();
    try {
      Thread current;
      synchronized (marks) {
        closed = true;
        current = writer;
        // Woken only when idle: an interrupt could fail the store call of the marks in flight. A
        // writer that is busy sees the flag once its call returns (bounded by the store's
        // timeouts) and settles those marks itself. Decided under the lock on which the writer
        // says it writes, and clears an interrupt that came before.
        if (current != null && !writing) {
          current.interrupt();
        }
      }
      if (current != null) {
        try {
          current.join(closeWait.toMillis());
        } catch (InterruptedException e) {
          interrupted = true; // the flag is clear again for the write below
        }
      }
      List<PendingOutcome> stillBeingWritten;
      synchronized (marks) {
        stillBeingWritten = writing ? List.copyOf(beingWritten) : List.of();
      }
      List<PendingOutcome> queued = new ArrayList<>();
      marks.drainTo(queued);
      parked.forEach(
          (thread, mark) -> {
            if (parked.remove(thread, mark)) {
              queued.add(mark);
            }
          });
      writeMarks(queued);
      return stillBeingWritten;
    } finally {
      if (interrupted) {
        Thread.currentThread().interrupt();
      }
    }
  }
}
