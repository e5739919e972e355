package io.consumerdedup.core.internal;

import io.consumerdedup.core.DedupExecutorClosedException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupLeaseLostException;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.core.DedupStoreUnavailableException;
import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.RejectedExecutionException;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The outcomes not written yet, by key (queued for the {@link SuccessMarkWriter}, or kept after a
 * write failed), and how each one ends: one fenced write settles it, written or taken over; an
 * outcome that could not be written is kept, its lease still renewed, and retried in the background
 * until it is settled. {@link Outcomes} and the {@link SuccessMarkWriter} both settle through here.
 */
final class PendingOutcomes {
  private static final Logger log = LoggerFactory.getLogger(PendingOutcomes.class);

  private final DedupStore store;
  private final DedupListener listener;
  private final LeaseRenewer renewer;
  private final Duration successRetention;
  private final Duration failedRetention;
  private final Duration retryPeriod;
  private final Map<DedupKey, PendingOutcome> pending = new ConcurrentHashMap<>();
  private volatile boolean closed;

  PendingOutcomes(
      DedupStore store,
      DedupListener listener,
      LeaseRenewer renewer,
      Duration successRetention,
      Duration failedRetention,
      Duration retryPeriod) {
    this.store = store;
    this.listener = listener;
    this.renewer = renewer;
    this.successRetention = successRetention;
    this.failedRetention = failedRetention;
    this.retryPeriod = retryPeriod;
  }

  /** Notes {@code outcome} as on its way, so that this process does not run its key again. */
  void add(PendingOutcome outcome) {
    list(outcome);
  }

  /**
   * Lists {@code outcome} under its key unless a later attempt of the key is listed; answers the
   * one listed. Two attempts of one key: the first one's lease ran out while its handler ran, and
   * this process claimed the key again. The stale one, listed in the place of a later one kept, was
   * refused and unlisted the key while the later SUCCESS was still unwritten: reported as recorded,
   * its key claimed again by this process, its record passed by a Spring consumer's commit.
   */
  private PendingOutcome list(PendingOutcome outcome) {
    return pending.merge(
        outcome.key, outcome, (earlier, later) -> earlier.token > later.token ? earlier : later);
  }

  /** Whether an outcome of {@code key} is still to be written (queued, or kept for retrying). */
  boolean contains(DedupKey key) {
    return pending.containsKey(key);
  }

  /**
   * Writes the kept outcome of an earlier attempt of {@code key}, if there is one.
   *
   * @throws DedupStoreUnavailableException the kept outcome still cannot be written
   */
  void settle(DedupKey key, @Nullable String source) {
    PendingOutcome kept = pending.get(key);
    if (kept == null) {
      return;
    }
    // Taken as a background retry takes it, so that a close meanwhile leaves the outcome to this
    // write: given up under it, an ERROR said it was not recorded, another consumer perhaps
    // running the handler again, and this write then recorded it. A retry already on its way
    // keeps it; this write goes along, fenced as it is.
    boolean taken = kept.retrying.compareAndSet(false, true);
    boolean givenUp = false;
    try {
      write(kept);
    } catch (DedupStoreException e) {
      if (taken && closed) {
        // Left to this write by the close: nothing retries the outcome any more.
        givenUp = true;
        pending.remove(key, kept);
        kept.cancelRetries();
        giveUp(kept, e);
      }
      throw new DedupStoreUnavailableException(
          "The "
              + kept.status()
              + " of an earlier attempt ("
              + kept.token
              + ") of this key is not recorded yet; not running the handler again until it is",
          key,
          source,
          e);
    } finally {
      if (taken && !givenUp) {
        kept.retrying.set(false);
      }
    }
  }

  /**
   * One fenced write of {@code outcome}; true if it is written (now or by an earlier try), false if
   * another consumer holds the key. Either way the outcome is settled: renewal stops, the listener
   * hears of it.
   *
   * @throws DedupStoreException the write failed, whatever the store threw (an Error too): the
   *     outcome is not settled, and the caller keeps it
   */
  boolean write(PendingOutcome outcome) {
    boolean written;
    try {
      written =
          outcome.error == null
              ? store.complete(outcome.claim(), successRetention)
              : store.fail(outcome.claim(), outcome.error, failedRetention);
    } catch (DedupStoreException e) {
      throw e;
    } catch (RuntimeException | Error e) {
      // Such as an OutOfMemoryError from getConnection. Escaping as it is, it passed every
      // caller's keeping of the outcome: neither written nor kept, its lease renewed for as long
      // as the executor ran, so the key stayed PROCESSING and its deliveries "in progress".
      throw new DedupStoreException(FailureTexts.describe(e), outcome.key, outcome.source, e);
    }
    return settle(outcome, written);
  }

  /** Settles {@code outcome} after a write that applied ({@code written}) or was fenced out. */
  boolean settle(PendingOutcome outcome, boolean written) {
    if (!outcome.settled.compareAndSet(false, true)) {
      return written; // settled concurrently by the background retry
    }
    outcome.renewal.outcomeSettled();
    try {
      LeaseLoss loss = null;
      if (!written) {
        loss = LeaseLoss.read(store, outcome.claim());
        if (loss.kind() == LeaseLoss.Kind.GIVEN_BACK) {
          // Refused while another consumer held the key, which it has given back unrun since:
          // the outcome is this claim's again, and dropped it left the effect to be applied once
          // more by the next delivery.
          written = writeAgain(outcome);
          if (!written) {
            loss = LeaseLoss.read(store, outcome.claim());
          }
        }
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
      } else {
        lost(outcome, loss == null ? LeaseLoss.read(store, outcome.claim()) : loss);
      }
    } finally {
      // Whatever the lines above throw (the application's listener, a log appender, an
      // OutOfMemoryError as a line is formatted), the outcome is settled and nothing retries it:
      // whoever waits for it (a poll's commit, completeAsync) would otherwise wait for ever.
      if (written) {
        outcome.written.complete(null);
      } else {
        outcome.written.completeExceptionally(
            new DedupLeaseLostException(
                outcome.key, outcome.token, outcome.status(), outcome.source, outcome.releaseNote));
      }
    }
    return written;
  }

  /**
   * The fenced write of {@code outcome} sent once more, after a takeover was given back; false if
   * refused or if it failed (logged): the outcome is then lost as it would have been.
   */
  private boolean writeAgain(PendingOutcome outcome) {
    try {
      return outcome.error == null
          ? store.complete(outcome.claim(), successRetention)
          : store.fail(outcome.claim(), outcome.error, failedRetention);
    } catch (RuntimeException | Error e) {
      log.warn(
          "Could not write the {} of {} (attempt {}) again after a takeover was given back",
          outcome.status(),
          DeliverySources.where(outcome.key, outcome.source),
          outcome.token,
          FailureTexts.loggable(e));
      return false;
    }
  }

  /**
   * Says that {@code outcome} was fenced out, and tells the listener once per lost lease. {@code
   * loss} was read to say what happened: after an operator's release nobody holds the key, and a
   * message sending the reader to "the new holder" would be wrong.
   */
  private void lost(PendingOutcome outcome, LeaseLoss loss) {
    outcome.renewal.markLost();
    outcome.releaseNote = loss.releaseNote();
    if (loss.kind() == LeaseLoss.Kind.RELEASED) {
      log.warn(
          "Lease on {} (attempt {}) was released by an operator ({}); its {} was not recorded:"
              + " nobody holds the key, which is FAILED, and its next delivery runs the handler"
              + " again",
          DeliverySources.where(outcome.key, outcome.source),
          outcome.token,
          loss.releaseNote(),
          outcome.status());
    } else {
      log.warn(
          "Lease on {} (attempt {}) was taken over by another consumer; its {} was not recorded so"
              + " as not to overwrite the new holder",
          DeliverySources.where(outcome.key, outcome.source),
          outcome.token,
          outcome.status());
    }
    if (outcome.renewal.firstToReportLoss()) {
      listener.leaseLost(outcome.key, outcome.token);
    }
  }

  /**
   * Keeps {@code outcome}, which could not be written, and retries it in the background.
   *
   * @return false if it is given up instead (logged at ERROR, its future failed with {@link
   *     DedupExecutorClosedException}): the executor is closed, or its renewer refused the retry,
   *     which only a closed one does
   */
  boolean keep(PendingOutcome outcome, DedupStoreException error) {
    try {
      listener.storeFailed(outcome.key, error);
    } catch (RuntimeException | Error e) {
      // The application's listener throwing an Error (the composite one lets those through): thrown
      // on, it stopped the keeping, and the writer's handling of the marks that failed with this
      // one, whose futures nobody completed then, their keys PROCESSING and nothing retrying them.
      // It rides with the store's error, which the caller is told.
      if (e != error) {
        error.addSuppressed(e);
      }
    }
    if (closed) {
      pending.remove(outcome.key, outcome); // a queued mark was noted as on its way
      giveUp(outcome, error);
      return false;
    }
    outcome.kept = true;
    // Two kept attempts of one key: both go on being retried, each until its own fenced write
    // settles it (the stale one's is refused, which stops its renewal); listed is the latest
    // claim's. Cancelling the one listed before left its renewal asking the store every interval
    // for the executor's life, and when the stale one came second, the latest one's SUCCESS was
    // never written: its key PROCESSING, its lease renewed, every redelivery "in progress".
    PendingOutcome listed = list(outcome);
    try {
      outcome.retries = renewer.repeat(() -> retry(outcome), retryPeriod);
    } catch (RejectedExecutionException e) {
      // Closed since the check above: escaping raw, it replaced what the caller is owed (the
      // closed executor's exception, or the handler's own), and the outcome stayed listed as
      // retried though nothing retried it.
      error.addSuppressed(e);
    }
    if (closed || outcome.retries == null) {
      // A close that came meanwhile may have given up the outcomes before this one was added; one
      // not listed is given up by nobody else.
      if (pending.remove(outcome.key, outcome) || listed != outcome) {
        outcome.cancelRetries();
        giveUp(outcome, error);
      }
      return false;
    }
    if (outcome.settled.get()) {
      // Settled while it was being kept (a redelivery's settlePending wrote it): that settle
      // unlisted it and cancelled its retries before they were here. Listed again, its key was
      // taken for one whose outcome is on its way for the executor's life, retried by a task that
      // never stopped. Settled is set before a settle unlists, so one of the two removes it.
      pending.remove(outcome.key, outcome);
      outcome.cancelRetries();
    }
    return true;
  }

  private void giveUp(PendingOutcome outcome, @Nullable Throwable cause) {
    outcome.written.completeExceptionally(closedBeforeWritten(outcome, cause));
    log.error(
        "Closing with the {} of {} (attempt {}) not recorded: once its lease runs out, another"
            + " consumer may run the handler for the key again{}",
        outcome.status(),
        DeliverySources.where(outcome.key, outcome.source),
        outcome.token,
        cause == null ? "" : " (" + cause + ")");
  }

  private void retry(PendingOutcome outcome) {
    if (outcome.settled.get() || !outcome.retrying.compareAndSet(false, true)) {
      return;
    }
    boolean givenUp = false;
    try {
      write(outcome);
    } catch (DedupStoreException e) {
      if (closed) {
        // Left to this retry by the close (see giveUp), or failed after it began: nothing retries
        // the outcome any more. Left retrying, so that nobody else gives it up again.
        givenUp = true;
        pending.remove(outcome.key, outcome);
        outcome.cancelRetries();
        giveUp(outcome, e);
        return;
      }
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
      // The store's failures arrive as DedupStoreException: what else comes is the application's
      // listener, told of the outcome once this write settled it. Logged as this retry's failure,
      // it reported a SUCCESS just recorded as not written; and printed raw, an Error whose
      // getMessage() throws threw out of the line, ending this worker without a word.
      log.error(
          "The {} of {} (attempt {}) is settled, but the DedupListener threw on hearing of it;"
              + " ignored",
          outcome.status(),
          DeliverySources.where(outcome.key, outcome.source),
          outcome.token,
          FailureTexts.loggable(e));
    } finally {
      if (!givenUp) {
        outcome.retrying.set(false);
      }
    }
  }

  /**
   * The write of {@code open} failed: keeps each outcome for the background retry (unless closed)
   * and fails its future.
   *
   * @return whether they are all kept; false once the executor is closed, when nothing retries them
   *     any more (said here or by {@link #keep}, in the log)
   */
  boolean notWritten(List<PendingOutcome> open, DedupStoreException e) {
    boolean keeping = !closed;
    boolean allKept = keeping;
    for (PendingOutcome outcome : open) {
      if (outcome.settled.get()) {
        continue; // settled before the failure
      }
      boolean givenUp = !keeping;
      try {
        if (keeping) {
          // False if the executor closed meanwhile: given up then, and said so, by keep.
          givenUp = !keep(outcome, e);
          allKept &= !givenUp;
        } else {
          pending.remove(outcome.key, outcome);
        }
      } catch (RuntimeException | Error keepFailed) {
        // Such as an OutOfMemoryError as the retry is scheduled: the outcomes after this one are
        // still kept, and each future still completed.
        log.warn("Could not keep the SUCCESS of {} for retrying", outcome.key, keepFailed);
      } finally {
        outcome.written.completeExceptionally(
            givenUp
                ? closedBeforeWritten(outcome, e)
                : notRecordedYet(outcome.key, outcome.source, e));
      }
    }
    if (!keeping) {
      log.error(
          "Closing with the SUCCESS of {} not written ({}): their records are delivered again, and"
              + " once their leases run out another consumer may run the handlers for their keys"
              + " again",
          open.stream().map(outcome -> DeliverySources.where(outcome.key, outcome.source)).toList(),
          FailureTexts.describe(e));
    }
    return allKept;
  }

  static DedupStoreUnavailableException notRecordedYet(
      DedupKey key, @Nullable String source, DedupStoreException e) {
    return new DedupStoreUnavailableException(
        "Handler succeeded but SUCCESS is not recorded yet; it is retried in the background while"
            + " the lease is held, and a redelivery is answered once it is recorded",
        key,
        source,
        e);
  }

  private static DedupExecutorClosedException closedBeforeWritten(
      PendingOutcome outcome, @Nullable Throwable cause) {
    return new DedupExecutorClosedException(
        "The executor was closed before the " + outcome.status() + " of this key was recorded",
        outcome.key,
        outcome.source,
        cause);
  }

  /** Outcomes still not recorded, by key: for diagnostics. */
  Map<DedupKey, String> unrecorded() {
    Map<DedupKey, String> view = new ConcurrentHashMap<>();
    pending.forEach((key, outcome) -> view.put(key, outcome.status()));
    return view;
  }

  /** From now on an outcome that cannot be written is given up rather than kept. */
  void stopKeeping() {
    closed = true;
  }

  /**
   * Gives up the outcomes still not recorded (logged at ERROR), their futures failed with {@link
   * DedupExecutorClosedException}, but for {@code beingWritten} and those whose background retry is
   * on its way: that write settles them (written, or given up once it fails, as nothing keeps them
   * any more).
   */
  void giveUp(Collection<PendingOutcome> beingWritten) {
    Set<PendingOutcome> leftToTheirWrite = Set.copyOf(beingWritten);
    Throwable first = null;
    try {
      for (PendingOutcome outcome : pending.values()) {
        if (leftToTheirWrite.contains(outcome)) {
          continue;
        }
        // Each one regardless of what giving up the one before threw (its ERROR line, an appender
        // out of memory as it formats it): stopped there, the outcomes after it were neither
        // logged nor failed, and whoever waited on their futures waited for good.
        try {
          outcome.cancelRetries();
        } catch (RuntimeException | Error e) {
          // In a try of its own: thrown before the give-up below, it left the outcome neither
          // given up nor taken, its future incomplete and whoever waited on it waiting for good.
          first = FirstFailure.of(first, e);
        }
        try {
          // A background retry on its way settles its outcome, as the writer's write does, and
          // gives it up itself if it fails: given up under it, the outcome was said at ERROR to
          // be not recorded, another consumer perhaps running its handler again, and the retry
          // then recorded it. Taken here, no retry of it starts any more.
          if (outcome.retrying.compareAndSet(false, true)) {
            giveUp(outcome, null);
          }
        } catch (RuntimeException | Error e) {
          first = FirstFailure.of(first, e);
        }
      }
    } finally {
      pending.clear();
    }
    if (first instanceof Error error) {
      throw error;
    }
    if (first != null) {
      throw (RuntimeException) first;
    }
  }
}
