package io.consumerdedup.core.internal;

import io.consumerdedup.core.DedupExecutorClosedException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupLeaseLostException;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.core.DedupStoreUnavailableException;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Writes the outcome of a held claim (SUCCESS or FAILED), fenced by its token, and keeps an outcome
 * that could not be written: its lease stays renewed and the write is retried in the background
 * until it is written or the key is taken over, and this process never runs the handler for that
 * key again before then ({@link #settlePending}). So a short database outage right after the
 * handler neither loses the outcome nor lets the lease lapse into a second run.
 *
 * <p>The outcomes on their way, and the keeping and retrying, are {@link PendingOutcomes}'; the
 * grouped SUCCESS marks ({@link #completeLater}, {@link #completeWithNextClaim}) are written by the
 * {@link SuccessMarkWriter}.
 */
public final class Outcomes implements AutoCloseable {
  private static final Logger log = LoggerFactory.getLogger(Outcomes.class);
  private static final Duration LONGEST_RETRY_PERIOD = Duration.ofSeconds(1);

  private final DedupListener listener;
  private final PendingOutcomes pending;
  private final SuccessMarkWriter marks;

  public Outcomes(
      DedupStore store,
      DedupListener listener,
      LeaseRenewer renewer,
      Duration successRetention,
      Duration failedRetention,
      Duration renewalInterval) {
    this.listener = listener;
    Duration retryPeriod =
        renewalInterval.compareTo(LONGEST_RETRY_PERIOD) < 0
            ? renewalInterval
            : LONGEST_RETRY_PERIOD;
    this.pending =
        new PendingOutcomes(
            store, listener, renewer, successRetention, failedRetention, retryPeriod);
    this.marks = new SuccessMarkWriter(store, renewer, pending, successRetention, retryPeriod);
  }

  /**
   * Records SUCCESS for the claim of {@code key} held with {@code token}.
   *
   * @throws DedupLeaseLostException another consumer took the key over first
   * @throws DedupStoreUnavailableException SUCCESS is not written yet; it is kept and retried in
   *     the background while the lease is renewed
   * @throws DedupExecutorClosedException SUCCESS could not be written and the executor is closed:
   *     it is given up, as {@link #close()} gives up outcomes
   */
  public void complete(
      DedupKey key,
      int token,
      @Nullable String source,
      LeaseRenewer.Renewal renewal,
      Duration handlerTime) {
    PendingOutcome outcome = PendingOutcome.success(key, token, source, renewal, handlerTime);
    try {
      if (pending.write(outcome)) {
        return;
      }
    } catch (DedupStoreException e) {
      if (!pending.keep(outcome, e)) {
        // The executor closed: nothing retries it (said at ERROR by keep).
        throw new DedupExecutorClosedException(
            "The executor was closed before the SUCCESS of this key was recorded", key, source, e);
      }
      log.warn(
          "Handler for {} (attempt {}) succeeded, but SUCCESS could not be recorded yet; keeping"
              + " the lease and retrying in the background. This process will not run the handler"
              + " for the key again meanwhile: {}",
          DeliverySources.where(key, source),
          token,
          e.getMessage());
      throw PendingOutcomes.notRecordedYet(key, source, e);
    } catch (RuntimeException | Error listenerFailed) {
      // Thrown by the application's listener as it was told how the write ended (a store failure
      // arrives as a DedupStoreException). After a written SUCCESS it is the caller's to see.
      if (!outcome.written.isCompletedExceptionally()) {
        throw listenerFailed;
      }
      // Told of a lost lease: thrown on, it replaced the loss, on which the adapters decide to
      // retry the record later rather than to count it failed.
      DedupLeaseLostException lost =
          new DedupLeaseLostException(key, token, "SUCCESS", source, outcome.releaseNote);
      lost.addSuppressed(listenerFailed);
      throw lost;
    }
    throw new DedupLeaseLostException(key, token, "SUCCESS", source, outcome.releaseNote);
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
    PendingOutcome outcome = PendingOutcome.success(key, token, source, renewal, handlerTime);
    pending.add(outcome);
    marks.queue(outcome);
    return outcome.written;
  }

  /**
   * Records SUCCESS for the claim together with the next claim that the calling thread sends
   * ({@link #takeParked}): one commit for both, for a caller that claims record by record. If the
   * thread sends none within a few milliseconds, or parks another mark first, or {@link
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
    PendingOutcome outcome = PendingOutcome.success(key, token, source, renewal, handlerTime);
    pending.add(outcome);
    marks.park(outcome);
    return outcome.written;
  }

  /** Hands the calling thread's mark that waits for its next claim to the writer thread now. */
  public void flushParked() {
    marks.flushParked();
  }

  /**
   * The SUCCESS mark that the calling thread left for its next claim, taken for the claim of {@code
   * claimed} ({@link io.consumerdedup.core.DedupStore#claimCompleting}); null if there is none, or
   * it is of the same key (written first then, as any pending outcome of the key).
   */
  public @Nullable PendingOutcome takeParked(DedupKey claimed) {
    return marks.takeParked(claimed);
  }

  /** The claim that carried {@code mark} answered: the mark is written, or its lease was lost. */
  public void writtenWithClaim(PendingOutcome mark, boolean written) {
    pending.settle(mark, written);
  }

  /**
   * The claim that carried {@code mark} failed, so whether the mark was written is unknown: it is
   * kept, its lease renewed, and written in the background, as an outcome that could not be
   * written.
   */
  public void notWrittenWithClaim(PendingOutcome mark, RuntimeException e) {
    // Described safely: a failure whose toString() throws (a closed pool session's) threw here,
    // before the mark was kept, and its future never completed, its key PROCESSING under a lease
    // renewed for as long as the executor ran.
    DedupStoreException failure =
        e instanceof DedupStoreException store
            ? store
            : new DedupStoreException(FailureTexts.describe(e), mark.key, mark.source, e);
    if (!pending.notWritten(List.of(mark), failure)) {
      return; // the executor is closed: said by notWritten
    }
    log.warn(
        "Handler for {} succeeded, but SUCCESS could not be recorded yet; keeping the lease and"
            + " retrying in the background: {}",
        DeliverySources.where(mark.key, mark.source),
        FailureTexts.messageOf(e));
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
    PendingOutcome outcome = PendingOutcome.failure(key, token, source, renewal, describe(error));
    try {
      pending.write(outcome);
    } catch (DedupStoreException e) {
      // The handler's own exception goes on either way; the store's says why FAILED is missing.
      error.addSuppressed(e);
      if (pending.keep(outcome, e)) {
        log.warn(
            "Handler for {} (attempt {}) failed, and FAILED could not be recorded yet; keeping the"
                + " lease and retrying in the background: {}",
            DeliverySources.where(key, source),
            token,
            e.getMessage());
      } // else the executor closed, and keep said at ERROR that it is given up
    } catch (RuntimeException | Error listenerFailed) {
      // Thrown by the application's listener as it was told that the lease was lost (a store
      // failure arrives as a DedupStoreException): thrown on, it replaced the handler's own
      // exception, and the listener never heard of the failure.
      if (listenerFailed != error) {
        error.addSuppressed(listenerFailed);
      }
    }
    tellFailed(listener, key, token, error);
  }

  /**
   * Tells {@code listener} that the handler threw {@code error}. What the listener throws is added
   * to {@code error} as suppressed: an Error (which the composite listener does not catch) escaping
   * here replaced the handler's exception, which the caller's retry and dead-letter decisions read.
   */
  public static void tellFailed(
      DedupListener listener, DedupKey key, int attempt, Throwable error) {
    try {
      listener.failed(key, attempt, error);
    } catch (RuntimeException | Error e) {
      if (e != error) {
        error.addSuppressed(e);
      }
    }
  }

  /** Whether an outcome of {@code key} is still to be written (queued, or kept for retrying). */
  public boolean isPending(DedupKey key) {
    return pending.contains(key);
  }

  /**
   * Writes the kept outcome of an earlier attempt of {@code key}, if there is one, before this
   * process claims the key again: a handler whose SUCCESS is not yet recorded must not run again.
   *
   * @throws DedupStoreUnavailableException the kept outcome still cannot be written
   */
  public void settlePending(DedupKey key, @Nullable String source) {
    pending.settle(key, source);
  }

  /** Outcomes still not recorded, by key: for diagnostics. */
  public Map<DedupKey, String> unrecorded() {
    return pending.unrecorded();
  }

  /**
   * Stops the writer and writes the marks still queued, once; the outcomes that are still not
   * recorded then are given up (logged at ERROR), their futures failed with {@link
   * DedupExecutorClosedException}.
   */
  @Override
  public void close() {
    pending.stopKeeping();
    // The marks of a write still on its way are that write's to settle.
    pending.giveUp(marks.close());
  }

  /**
   * {@code error} as the record's {@code last_error} keeps it. Its message is read through {@link
   * FailureTexts#messageOf}: a handler's exception whose {@code getMessage()} throws (an entity
   * loaded lazily, a closed resource) threw here, before FAILED was written, and left the record
   * PROCESSING under a lease renewed for good, the caller hearing the message's exception instead
   * of the handler's.
   */
  public static String describe(Throwable error) {
    String message = FailureTexts.messageOf(error);
    String text = error.getClass().getName() + (message != null ? ": " + message : "");
    return StoredText.cut(text, StoredText.MAX_ERROR_LENGTH);
  }
}
