package io.consumerdedup.core.internal;

import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupExecutorClosedException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupLeaseLostException;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.core.DedupStoreUnavailableException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.atomic.AtomicBoolean;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Writes the outcome of a held claim (SUCCESS or FAILED), fenced by its token, and keeps an outcome
 * that could not be written: its lease stays renewed and the write is retried in the background
 * until it is written or the key is taken over, and this process never runs the handler for that
 * key again before then ({@link #settlePending}). So a short database outage right after the
 * handler neither loses the outcome nor lets the lease lapse into a second run.
 */
public final class Outcomes implements AutoCloseable {
  private static final Logger log = LoggerFactory.getLogger(Outcomes.class);
  private static final Duration LONGEST_RETRY_PERIOD = Duration.ofSeconds(1);

  /** A poll's worth of marks, and a bound on the statement's arrays. */
  private static final int MAX_MARKS_PER_WRITE = 1000;

  /**
   * How long a SUCCESS mark waits for the next claim of its thread ({@link #completeWithNextClaim})
   * before the writer thread writes it on its own: a record's claim follows the previous record's
   * handler at once, unless the poll has ended.
   */
  private static final Duration PARKED_MARK_WAIT = Duration.ofMillis(5);

  private final DedupStore store;
  private final DedupListener listener;
  private final LeaseRenewer renewer;
  private final Duration successRetention;
  private final Duration failedRetention;
  private final Duration retryPeriod;
  private final Map<DedupKey, Pending> pending = new ConcurrentHashMap<>();
  private final BlockingQueue<Pending> marks = new LinkedBlockingQueue<>();

  /** Per thread, the SUCCESS mark that waits to be written with the thread's next claim. */
  private final Map<Thread, Pending> parked = new ConcurrentHashMap<>();

  private @Nullable Thread writer; // guarded by marks
  private volatile boolean closed; // set under marks
  private volatile boolean writing;

  public Outcomes(
      DedupStore store,
      DedupListener listener,
      LeaseRenewer renewer,
      Duration successRetention,
      Duration failedRetention,
      Duration renewalInterval) {
    this.store = store;
    this.listener = listener;
    this.renewer = renewer;
    this.successRetention = successRetention;
    this.failedRetention = failedRetention;
    this.retryPeriod =
        renewalInterval.compareTo(LONGEST_RETRY_PERIOD) < 0
            ? renewalInterval
            : LONGEST_RETRY_PERIOD;
  }

  /**
   * Records SUCCESS for the claim of {@code key} held with {@code token}.
   *
   * @throws DedupLeaseLostException another consumer took the key over first
   * @throws DedupStoreUnavailableException SUCCESS is not written yet; it is kept and retried in
   *     the background while the lease is renewed
   */
  public void complete(
      DedupKey key,
      int token,
      @Nullable String source,
      LeaseRenewer.Renewal renewal,
      Duration handlerTime) {
    Pending outcome = new Pending(key, token, source, renewal, null, handlerTime);
    renewal.settling();
    try {
      if (write(outcome)) {
        return;
      }
    } catch (DedupStoreException e) {
      keep(outcome, e);
      log.warn(
          "Handler for {} (attempt {}) succeeded, but SUCCESS could not be recorded yet; keeping"
              + " the lease and retrying in the background. This process will not run the handler"
              + " for the key again meanwhile: {}",
          DeliverySources.where(key, source),
          token,
          e.getMessage());
      throw notRecordedYet(key, source, e);
    }
    throw new DedupLeaseLostException(key, token, "SUCCESS", source);
  }

  private static DedupStoreUnavailableException notRecordedYet(
      DedupKey key, @Nullable String source, DedupStoreException e) {
    return new DedupStoreUnavailableException(
        "Handler succeeded but SUCCESS is not recorded yet; it is retried in the background while"
            + " the lease is held, and a redelivery is answered once it is recorded",
        key,
        source,
        e);
  }

  /**
   * Records SUCCESS for the claim soon, grouped with the SUCCESS of other claims into one store
   * call by a writer thread, so the caller goes on to its next record while the mark is written.
   * Until it is written, this process does not run the handler for the key again ({@link
   * #settlePending} writes it first).
   *
   * @return completes when SUCCESS is written; exceptionally with {@link DedupLeaseLostException}
   *     if another consumer took the key over first, or with {@link DedupStoreUnavailableException}
   *     if it could not be written yet (it is then kept and retried in the background, as by {@link
   *     #complete}); once closed, it is written at once on the calling thread, and the future fails
   *     with {@link DedupExecutorClosedException} if that write fails
   */
  public CompletableFuture<Void> completeLater(
      DedupKey key,
      int token,
      @Nullable String source,
      LeaseRenewer.Renewal renewal,
      Duration handlerTime) {
    Pending outcome = new Pending(key, token, source, renewal, null, handlerTime);
    renewal.settling();
    pending.put(key, outcome);
    queue(outcome);
    return outcome.written;
  }

  /** Hands {@code outcome} to the writer thread; once closed, writes it on the calling thread. */
  private void queue(Pending outcome) {
    synchronized (marks) {
      if (!closed) {
        marks.add(outcome);
        Thread current = writer;
        // A writer that died (an Error escaped it) is replaced; the marks it left queued are its
        // successor's. Marks it had taken were settled or kept before it died.
        if (current == null || !current.isAlive()) {
          writer = new Thread(this::writeQueuedMarks, "consumer-dedup-outcome-writer");
          writer.setDaemon(true);
          writer.start();
        }
        return;
      }
    }
    // Closed: no writer any more, so one write now, on the caller's thread, rather than none.
    writeMarks(List.of(outcome));
  }

  /**
   * Records SUCCESS for the claim together with the next claim that the calling thread sends
   * ({@link #takeParked}): one commit for both, for a caller that claims record by record. If the
   * thread sends none within {@link #PARKED_MARK_WAIT}, or parks another mark first, or {@link
   * #flushParked()} is called, the writer thread writes it as {@link #completeLater} does. Until it
   * is written, this process does not run the handler for the key again.
   *
   * @return as {@link #completeLater}
   */
  public CompletableFuture<Void> completeWithNextClaim(
      DedupKey key,
      int token,
      @Nullable String source,
      LeaseRenewer.Renewal renewal,
      Duration handlerTime) {
    Pending outcome = new Pending(key, token, source, renewal, null, handlerTime);
    renewal.settling();
    pending.put(key, outcome);
    Thread thread = Thread.currentThread();
    Pending earlier = parked.put(thread, outcome);
    if (earlier != null) {
      unpark(earlier);
      queue(earlier); // no claim came between the two
    }
    try {
      if (!closed) {
        outcome.unparking =
            renewer.after(
                PARKED_MARK_WAIT,
                () -> {
                  if (parked.remove(thread, outcome)) {
                    queue(outcome);
                  }
                });
        return outcome.written;
      }
    } catch (RejectedExecutionException e) {
      // Closed meanwhile: no timer any more.
    }
    flushParked(); // closed: written now, on this thread
    return outcome.written;
  }

  /** Hands the calling thread's mark that waits for its next claim to the writer thread now. */
  public void flushParked() {
    Pending mark = parked.remove(Thread.currentThread());
    if (mark != null) {
      unpark(mark);
      queue(mark);
    }
  }

  /**
   * The SUCCESS mark that the calling thread left for its next claim, taken for the claim of {@code
   * claimed} ({@link io.consumerdedup.core.DedupStore#claimCompleting}); null if there is none, or
   * it is of the same key (written first then, as any pending outcome of the key).
   */
  public @Nullable Pending takeParked(DedupKey claimed) {
    if (parked.isEmpty()) {
      return null;
    }
    Thread thread = Thread.currentThread();
    Pending mark = parked.get(thread);
    if (mark == null || mark.key.equals(claimed) || !parked.remove(thread, mark)) {
      return null;
    }
    unpark(mark);
    return mark.settled.get() ? null : mark;
  }

  private static void unpark(Pending mark) {
    ScheduledFuture<?> unparking = mark.unparking;
    if (unparking != null) {
      unparking.cancel(false);
    }
  }

  /** The claim that carried {@code mark} answered: the mark is written, or its lease was lost. */
  public void writtenWithClaim(Pending mark, boolean written) {
    settle(mark, written);
  }

  /**
   * The claim that carried {@code mark} failed, so whether the mark was written is unknown: it is
   * kept, its lease renewed, and written in the background, as an outcome that could not be
   * written.
   */
  public void notWrittenWithClaim(Pending mark, RuntimeException e) {
    DedupStoreException failure =
        e instanceof DedupStoreException store
            ? store
            : new DedupStoreException(e.toString(), mark.key, mark.source, e);
    notWritten(List.of(mark), failure);
    log.warn(
        "Handler for {} succeeded, but SUCCESS could not be recorded yet; keeping the lease and"
            + " retrying in the background: {}",
        DeliverySources.where(mark.key, mark.source),
        e.getMessage());
  }

  /**
   * Writes the queued SUCCESS marks, as many as are queued at once in one store call: while one
   * call is on its way, the marks of the next records gather for the next one. Runs until closed;
   * the marks queued then are written by {@link #close()}.
   */
  private void writeQueuedMarks() {
    List<Pending> group = new ArrayList<>();
    while (!closed) {
      try {
        group.add(marks.take());
      } catch (InterruptedException e) {
        return; // closing
      }
      marks.drainTo(group, MAX_MARKS_PER_WRITE - 1);
      writing = true;
      try {
        writeMarks(group);
      } finally {
        writing = false;
        group.clear();
      }
    }
  }

  /**
   * Writes the marks in one store call. Whatever the call throws, an Error included, each mark ends
   * written, lost, or kept for the background retry with its future failed: none is dropped, and no
   * waiter waits on a future that nobody completes.
   */
  private void writeMarks(List<Pending> group) {
    List<Pending> open = group.stream().filter(outcome -> !outcome.settled.get()).toList();
    if (open.isEmpty()) {
      return;
    }
    List<ClaimResult.Claimed> claims =
        open.stream().map(outcome -> outcome.renewal.claim()).toList();
    try {
      FaultPoints.reached(FaultPoints.Point.BEFORE_SUCCESS_MARK);
      Set<DedupKey> lost = new HashSet<>(store.completeAll(claims, successRetention));
      FaultPoints.reached(FaultPoints.Point.AFTER_SUCCESS_MARK);
      open.forEach(outcome -> settle(outcome, !lost.contains(outcome.key)));
    } catch (DedupStoreException e) {
      notWritten(open, e);
      log.warn(
          "Handlers for {} succeeded, but SUCCESS could not be recorded yet; keeping the leases"
              + " and retrying in the background: {}",
          open.stream().map(outcome -> DeliverySources.where(outcome.key, outcome.source)).toList(),
          e.getMessage());
    } catch (RuntimeException | Error e) {
      // An Error too (an OutOfMemoryError from getConnection): the writer lives on, and the
      // outcomes are retried like those of an outage.
      log.error("Writing SUCCESS marks failed unexpectedly; retrying in the background", e);
      notWritten(open, new DedupStoreException(e.toString(), null, null, e));
    }
  }

  /** Keeps the outcomes for the background retry (unless closed) and fails their futures. */
  private void notWritten(List<Pending> open, DedupStoreException e) {
    for (Pending outcome : open) {
      if (outcome.settled.get()) {
        continue; // settled before the failure
      }
      boolean keeping = !closed; // once closed, nothing retries in the background
      try {
        if (keeping) {
          keep(outcome, e);
        } else {
          pending.remove(outcome.key, outcome);
        }
      } catch (RuntimeException keepFailed) {
        log.warn("Could not keep the SUCCESS of {} for retrying", outcome.key, keepFailed);
      } finally {
        outcome.written.completeExceptionally(
            keeping
                ? notRecordedYet(outcome.key, outcome.source, e)
                : closedBeforeWritten(outcome, e));
      }
    }
  }

  private static DedupExecutorClosedException closedBeforeWritten(
      Pending outcome, @Nullable Throwable cause) {
    return new DedupExecutorClosedException(
        "The executor was closed before the " + outcome.status() + " of this key was recorded",
        outcome.key,
        outcome.source,
        cause);
  }

  /**
   * Records FAILED for the claim, so that the next delivery retries. If FAILED cannot be written
   * yet, it is kept and retried in the background, and the store's error is added to {@code error}
   * as suppressed; a lost lease is reported to the listener (the new holder decides the outcome).
   */
  public void fail(
      DedupKey key,
      int token,
      @Nullable String source,
      LeaseRenewer.Renewal renewal,
      Throwable error) {
    Pending outcome = new Pending(key, token, source, renewal, describe(error), Duration.ZERO);
    renewal.settling();
    try {
      write(outcome);
    } catch (DedupStoreException e) {
      keep(outcome, e);
      log.warn(
          "Handler for {} (attempt {}) failed, and FAILED could not be recorded yet; keeping the"
              + " lease and retrying in the background: {}",
          DeliverySources.where(key, source),
          token,
          e.getMessage());
      error.addSuppressed(e);
    }
    listener.failed(key, token, error);
  }

  /** Whether an outcome of {@code key} is still to be written (queued, or kept for retrying). */
  public boolean isPending(DedupKey key) {
    return pending.containsKey(key);
  }

  /**
   * Writes the kept outcome of an earlier attempt of {@code key}, if there is one, before this
   * process claims the key again: a handler whose SUCCESS is not yet recorded must not run again.
   *
   * @throws DedupStoreUnavailableException the kept outcome still cannot be written
   */
  public void settlePending(DedupKey key, @Nullable String source) {
    Pending kept = pending.get(key);
    if (kept == null) {
      return;
    }
    try {
      write(kept);
    } catch (DedupStoreException e) {
      throw new DedupStoreUnavailableException(
          "The "
              + kept.status()
              + " of an earlier attempt ("
              + kept.token
              + ") of this key is not recorded yet; not running the handler again until it is",
          key,
          source,
          e);
    }
  }

  /**
   * One fenced write of {@code outcome}; true if it is written (now or by an earlier try), false if
   * another consumer holds the key. Either way the outcome is settled: renewal stops, the listener
   * hears of it.
   */
  private boolean write(Pending outcome) {
    return settle(
        outcome,
        outcome.error == null
            ? store.complete(outcome.key, outcome.token, successRetention)
            : store.fail(outcome.key, outcome.token, outcome.error, failedRetention));
  }

  /** Settles {@code outcome} after a write that applied ({@code written}) or was fenced out. */
  private boolean settle(Pending outcome, boolean written) {
    if (!outcome.settled.compareAndSet(false, true)) {
      return written; // settled concurrently by the background retry
    }
    pending.remove(outcome.key, outcome);
    outcome.cancelRetries();
    if (written) {
      outcome.renewal.stop();
      if (outcome.kept) {
        log.info(
            "Recorded the {} of {} (attempt {}) that could not be written earlier",
            outcome.status(),
            DeliverySources.where(outcome.key, outcome.source),
            outcome.token);
      }
      if (outcome.error == null) {
        listener.completed(outcome.key, outcome.token, outcome.handlerTime);
      }
      outcome.written.complete(null);
      return true;
    }
    outcome.renewal.markLost();
    log.warn(
        "Lease on {} (attempt {}) was taken over by another consumer; its {} was not recorded so"
            + " as not to overwrite the new holder",
        DeliverySources.where(outcome.key, outcome.source),
        outcome.token,
        outcome.status());
    listener.leaseLost(outcome.key, outcome.token);
    outcome.written.completeExceptionally(
        new DedupLeaseLostException(outcome.key, outcome.token, outcome.status(), outcome.source));
    return false;
  }

  private void keep(Pending outcome, DedupStoreException error) {
    listener.storeFailed(outcome.key, error);
    outcome.kept = true;
    Pending earlier = pending.put(outcome.key, outcome);
    if (earlier != null && earlier != outcome) {
      earlier.cancelRetries(); // a later attempt of the key supersedes it
    }
    outcome.retries = renewer.repeat(() -> retry(outcome), retryPeriod);
  }

  private void retry(Pending outcome) {
    if (outcome.settled.get() || !outcome.retrying.compareAndSet(false, true)) {
      return;
    }
    try {
      write(outcome);
    } catch (DedupStoreException e) {
      if (outcome.renewal.isLeaseLost() && !outcome.lapseReported) {
        outcome.lapseReported = true;
        log.error(
            "The {} of {} (attempt {}) is still not recorded and its lease may have run out:"
                + " another consumer may take the key over and run its handler again. Still"
                + " retrying: {}",
            outcome.status(),
            DeliverySources.where(outcome.key, outcome.source),
            outcome.token,
            e.getMessage());
      }
    } catch (RuntimeException | Error e) {
      log.warn("Retrying the {} of {} failed", outcome.status(), outcome.key, e);
    } finally {
      outcome.retrying.set(false);
    }
  }

  /** Outcomes still not recorded, by key: for diagnostics. */
  public Map<DedupKey, String> unrecorded() {
    Map<DedupKey, String> view = new ConcurrentHashMap<>();
    pending.forEach((key, outcome) -> view.put(key, outcome.status()));
    return view;
  }

  /**
   * Stops the writer and writes the marks still queued, once; the outcomes that are still not
   * recorded then are given up (logged at ERROR), their futures failed with {@link
   * DedupExecutorClosedException}.
   */
  @Override
  public void close() {
    Thread current;
    synchronized (marks) {
      closed = true;
      current = writer;
    }
    if (current != null) {
      // Woken only when idle: an interrupt could fail the store call of the marks in flight. A
      // writer that is busy sees the flag once its call returns (bounded by the store's timeouts)
      // and settles those marks itself.
      if (!writing) {
        current.interrupt();
      }
      try {
        current.join(retryPeriod.toMillis());
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
    List<Pending> queued = new ArrayList<>();
    marks.drainTo(queued);
    parked.forEach(
        (thread, mark) -> {
          if (parked.remove(thread, mark)) {
            unpark(mark);
            queued.add(mark);
          }
        });
    writeMarks(queued);
    pending.forEach(
        (key, outcome) -> {
          outcome.cancelRetries();
          outcome.written.completeExceptionally(closedBeforeWritten(outcome, null));
          log.error(
              "Closing with the {} of {} (attempt {}) not recorded: once its lease runs out,"
                  + " another consumer may run the handler for the key again",
              outcome.status(),
              DeliverySources.where(key, outcome.source),
              outcome.token);
        });
    pending.clear();
  }

  private static String describe(Throwable error) {
    String text =
        error.getClass().getName() + (error.getMessage() != null ? ": " + error.getMessage() : "");
    return text.length() <= StoredText.MAX_ERROR_LENGTH
        ? text
        : text.substring(0, StoredText.MAX_ERROR_LENGTH);
  }

  /** An outcome to write: SUCCESS when {@code error} is null, else FAILED with it. */
  public static final class Pending {
    final DedupKey key;
    final int token;
    final @Nullable String source;
    final LeaseRenewer.Renewal renewal;
    final @Nullable String error;
    final Duration handlerTime;
    final AtomicBoolean settled = new AtomicBoolean();
    final CompletableFuture<Void> written = new CompletableFuture<>();
    final AtomicBoolean retrying = new AtomicBoolean();
    volatile boolean kept;
    volatile boolean lapseReported;
    volatile @Nullable ScheduledFuture<?> retries;
    volatile @Nullable ScheduledFuture<?> unparking;

    Pending(
        DedupKey key,
        int token,
        @Nullable String source,
        LeaseRenewer.Renewal renewal,
        @Nullable String error,
        Duration handlerTime) {
      this.key = key;
      this.token = token;
      this.source = source;
      this.renewal = renewal;
      this.error = error;
      this.handlerTime = handlerTime;
    }

    String status() {
      return error == null ? "SUCCESS" : "FAILED";
    }

    /** The claim whose outcome this is. */
    public ClaimResult.Claimed claim() {
      return renewal.claim();
    }

    void cancelRetries() {
      ScheduledFuture<?> current = retries;
      if (current != null) {
        current.cancel(false);
      }
    }
  }
}
