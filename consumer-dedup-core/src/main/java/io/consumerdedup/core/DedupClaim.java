package io.consumerdedup.core;

import io.consumerdedup.core.internal.AfterCommit;
import io.consumerdedup.core.internal.DeliverySources;
import io.consumerdedup.core.internal.FailureTexts;
import io.consumerdedup.core.internal.FaultPoints;
import io.consumerdedup.core.internal.FirstFailure;
import io.consumerdedup.core.internal.LeaseRenewer;
import io.consumerdedup.core.internal.Outcomes;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.BiConsumer;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A claim on a key, from {@link IdempotentExecutor#claim(DedupKey, String, String)}: either the key
 * had already succeeded ({@link #isDuplicate()}: do not run the handler), or the caller holds it
 * and must end the claim with exactly one of {@link #complete()} or {@link #fail(Throwable)} once
 * its handler has run. Until then the lease is renewed in the background; a claim never ended keeps
 * its key PROCESSING until that renewal stops with the executor and the lease runs out.
 */
public final class DedupClaim {
  private static final Logger log = LoggerFactory.getLogger(DedupClaim.class);

  private final DedupKey key;
  private final int attempt;
  private final @Nullable String source;
  private final @Nullable Outcomes outcomes;
  private final LeaseRenewer.@Nullable Renewal renewal;
  private final boolean held;
  private final DedupListener listener;
  private final @Nullable ClaimCalls calls;

  /** For a claim in the caller's transaction: the claim, which a failure marks FAILED there. */
  private final ClaimResult.@Nullable Claimed inTransaction;

  private final long startNanos = System.nanoTime();
  private final AtomicBoolean ended = new AtomicBoolean();

  /**
   * The caller's transaction was found holding the record before its commit ({@link
   * #requireHeldBeforeCommit}): the record is committed, and ending the claim reads it no more.
   */
  private volatile boolean heldAtCommit;

  /** Ended by {@link #fail(Throwable)} in the caller's transaction, which may still commit. */
  private volatile boolean failedInTransaction;

  /**
   * Its handler ran, and both tries to hand its outcome over met an Error: open again, with the
   * write of that outcome (SUCCESS or FAILED) for {@link #endUnhandedOutcome()} to try once more.
   */
  private volatile @Nullable BiConsumer<Outcomes, LeaseRenewer.Renewal> unhandedOutcome;

  private DedupClaim(
      DedupKey key,
      int attempt,
      @Nullable String source,
      boolean held,
      @Nullable Outcomes outcomes,
      LeaseRenewer.@Nullable Renewal renewal,
      DedupListener listener,
      @Nullable ClaimCalls calls) {
    this(key, attempt, source, held, outcomes, renewal, listener, calls, null);
  }

  private DedupClaim(
      DedupKey key,
      int attempt,
      @Nullable String source,
      boolean held,
      @Nullable Outcomes outcomes,
      LeaseRenewer.@Nullable Renewal renewal,
      DedupListener listener,
      @Nullable ClaimCalls calls,
      ClaimResult.@Nullable Claimed inTransaction) {
    this.inTransaction = inTransaction;
    this.key = key;
    this.attempt = attempt;
    this.source = source;
    this.held = held;
    this.outcomes = outcomes;
    this.renewal = renewal;
    this.listener = listener;
    this.calls = calls;
  }

  static DedupClaim duplicate(DedupKey key, int attempt) {
    return new DedupClaim(key, attempt, null, false, null, null, DedupListener.NOOP, null);
  }

  /**
   * A claim under a lease, whose outcome {@code outcomes} writes, and which {@code calls} gives
   * back when released.
   */
  static DedupClaim leased(
      DedupKey key,
      int attempt,
      @Nullable String source,
      Outcomes outcomes,
      LeaseRenewer.Renewal renewal,
      DedupListener listener,
      ClaimCalls calls) {
    return new DedupClaim(key, attempt, source, true, outcomes, renewal, listener, calls);
  }

  /**
   * A claim inside the caller's transaction (mode TRANSACTIONAL): the record is already SUCCESS in
   * that transaction, and its commit or rollback is the outcome.
   */
  static DedupClaim inTransaction(
      ClaimResult.Claimed claim,
      @Nullable String source,
      DedupListener listener,
      ClaimCalls transactionCalls) {
    DedupClaim inTransaction =
        new DedupClaim(claim.key(), claim.token(), source, true, null, null, listener, null, claim);
    inTransaction.transactionCalls = transactionCalls;
    return inTransaction;
  }

  /**
   * Where a claim in the caller's transaction marks a failure; kept apart from {@code calls}, whose
   * absence tells {@link #release()} that the claim is the caller's transaction's to give back.
   */
  private @Nullable ClaimCalls transactionCalls;

  /** The key had already succeeded: the handler must not run, and there is nothing to end. */
  public boolean isDuplicate() {
    return !held;
  }

  public DedupKey key() {
    return key;
  }

  /** This claim's attempt (its fencing token); for a duplicate, the attempt that succeeded. */
  public int attempt() {
    return attempt;
  }

  /** Where the claiming delivery came from, if the caller said. */
  public @Nullable String source() {
    return source;
  }

  /**
   * Whether this holder may no longer hold the key: a renewal or a write was refused because
   * another consumer took it over, or the lease was not renewed within its length (the database
   * unreachable meanwhile). Once true, another consumer may be running the handler for the key; a
   * long-running handler can check it to stop early. Always false for a duplicate or a claim in the
   * caller's transaction (whose transaction holds the key).
   */
  public boolean isLeaseLost() {
    return renewal != null && renewal.isLeaseLost();
  }

  /**
   * Stops renewing the lease without ending the claim, for a handler its caller no longer waits for
   * (an asynchronous one that did not finish in time, and may never): the key is kept from other
   * consumers only until the lease runs out, after which another delivery may take it over and run
   * the handler. If the handler ends after all, {@link #complete()} or {@link #fail(Throwable)}
   * still write its outcome, fenced: refused with {@link DedupLeaseLostException} once another
   * consumer has taken the key over. Does nothing for a claim already ended, a duplicate, or a
   * claim in the caller's transaction.
   */
  public void stopRenewing() {
    if (renewal != null && !ended.get()) {
      renewal.stop();
    }
  }

  /**
   * Records SUCCESS: the handler has applied its effect.
   *
   * @throws DedupLeaseLostException another consumer took the key over before SUCCESS could be
   *     written (the handler's effect may be applied a second time by the new holder)
   * @throws DedupStoreUnavailableException SUCCESS is not written yet: it is retried in the
   *     background while the lease is renewed, and this process does not run the handler for the
   *     key again before it is written; retry the delivery later
   * @throws DedupExecutorClosedException SUCCESS could not be written and the executor is closed:
   *     nothing retries it, and the record is delivered again; retry the delivery later
   * @throws IllegalStateException the claim is a duplicate or was already ended, or it is in the
   *     caller's transaction, which the database rolled back under the handler (InnoDB at a
   *     deadlock the handler caught): roll the transaction back
   */
  public void complete() {
    long handlerNanos = System.nanoTime() - startNanos;
    end("complete");
    if (outcomes == null || renewal == null) {
      requireHeldInTransaction();
      AfterCommit.tell(() -> listener.completed(key, attempt, Duration.ofNanos(handlerNanos)));
      return;
    }
    try {
      FaultPoints.reached(FaultPoints.Point.ENDING);
      outcomes.complete(key, attempt, source, renewal, Duration.ofNanos(handlerNanos));
    } catch (Error e) {
      handOverAgain(
          e,
          outcomes,
          renewal,
          (o, r) -> o.complete(key, attempt, source, r, Duration.ofNanos(handlerNanos)));
      throw e;
    }
    FaultPoints.reached(FaultPoints.Point.AFTER_SUCCESS_MARK);
  }

  /**
   * Records SUCCESS like {@link #complete()}, but without waiting for it: the mark is written by a
   * writer thread of the executor together with the marks of other claims, in one store call, while
   * the caller goes on with its next record. Until it is written, this process does not run the
   * handler for the key again. Wait for the returned future before committing the record's offset:
   * a record whose offset is committed before its SUCCESS is written is re-applied if the process
   * dies in between and another consumer takes the key over.
   *
   * @return completes when SUCCESS is written; exceptionally with {@link DedupLeaseLostException}
   *     (another consumer took the key over first) or {@link DedupStoreUnavailableException} (not
   *     written yet; retried in the background, as by {@link #complete()})
   * @throws IllegalStateException the claim is a duplicate or was already ended, or it is in the
   *     caller's transaction, which the database rolled back under the handler (InnoDB at a
   *     deadlock the handler caught): roll the transaction back
   */
  public CompletableFuture<Void> completeAsync() {
    return completeInBackground(Outcomes::completeLater);
  }

  /**
   * Records SUCCESS like {@link #completeAsync()}, but in the same commit as the next claim that
   * the calling thread makes on the executor ({@link IdempotentExecutor#claim} or {@link
   * IdempotentExecutor#execute}), for a caller that claims record by record: the previous record's
   * SUCCESS then costs no commit of its own. If the thread makes no claim within a few
   * milliseconds, or calls {@link IdempotentExecutor#flushMarks()}, the executor's writer thread
   * writes it as {@link #completeAsync()} does. Until it is written, this process does not run the
   * handler for the key again. Wait for the returned future before committing the record's offset
   * (after the last record of a batch, call {@link IdempotentExecutor#flushMarks()} first, or the
   * wait includes those milliseconds).
   *
   * @return as {@link #completeAsync()}
   * @throws IllegalStateException the claim is a duplicate or was already ended, or it is in the
   *     caller's transaction, which the database rolled back under the handler (InnoDB at a
   *     deadlock the handler caught): roll the transaction back
   */
  public CompletableFuture<Void> completeWithNextClaim() {
    return completeInBackground(Outcomes::completeWithNextClaim);
  }

  /** How {@link #completeAsync()} or {@link #completeWithNextClaim()} hands SUCCESS over. */
  @FunctionalInterface
  private interface BackgroundSuccess {
    CompletableFuture<Void> handOver(
        Outcomes outcomes,
        DedupKey key,
        int attempt,
        @Nullable String source,
        LeaseRenewer.Renewal renewal,
        Duration handlerTime);
  }

  /**
   * Ends the claim with SUCCESS handed over by {@code handOver}; if an Error strikes that, SUCCESS
   * is written at once, as {@link #complete()} writes it (see handOverAgain).
   */
  private CompletableFuture<Void> completeInBackground(BackgroundSuccess handOver) {
    long handlerNanos = System.nanoTime() - startNanos;
    end("complete");
    if (outcomes == null || renewal == null) {
      requireHeldInTransaction();
      AfterCommit.tell(() -> listener.completed(key, attempt, Duration.ofNanos(handlerNanos)));
      return CompletableFuture.completedFuture(null);
    }
    try {
      FaultPoints.reached(FaultPoints.Point.ENDING);
      return handOver.handOver(
          outcomes, key, attempt, source, renewal, Duration.ofNanos(handlerNanos));
    } catch (Error e) {
      handOverAgain(
          e,
          outcomes,
          renewal,
          (o, r) -> o.complete(key, attempt, source, r, Duration.ofNanos(handlerNanos)));
      throw e;
    }
  }

  /**
   * Ends a held claim whose handler never ran, for {@link DedupClaims#releaseUnended()}: stops its
   * renewal and returns it, for the store to release its claim; null if it was ended already or is
   * not leased (a duplicate, or a claim in the caller's transaction).
   */
  LeaseRenewer.@Nullable Renewal endForRelease() {
    if (!held || renewal == null || !ended.compareAndSet(false, true)) {
      return null;
    }
    renewal.stop();
    FaultPoints.reached(FaultPoints.Point.GIVING_BACK);
    return renewal;
  }

  /**
   * Gives back a held claim whose handler has not run, and will not for this delivery, or ran and
   * threw an exception that waiting can help, which is not the handler's failure (a nested call's
   * key held by another consumer, the database unreachable: {@link #failOrRelease}): no attempt is
   * counted. The key's record is as it was before the claim (FAILED with its attempts and last
   * error; none for a key claimed for the first time), so the next delivery claims it as if this
   * one had not. If the store cannot be reached, the lease runs out instead (logged at WARN), and a
   * redelivery to this process takes the claim up before that.
   *
   * @throws IllegalStateException the claim is a duplicate or was already ended, or it is in the
   *     caller's transaction (mode TRANSACTIONAL), whose rollback gives it back
   */
  public void release() {
    if (held && calls == null) {
      throw new IllegalStateException(
          "The claim on "
              + key
              + " is in the caller's transaction: roll the transaction back to give it back");
    }
    end("release");
    Objects.requireNonNull(renewal).stop();
    Objects.requireNonNull(calls).releaseRenewed(List.of(renewal));
  }

  /**
   * Ends the claim after its handler threw {@code error}, as every adapter of this project does.
   * When waiting can let the handler succeed, the error is not the handler's failure, and the claim
   * is given back uncounted ({@link #release()}) while the adapter holds the record: the first
   * consumer-dedup exception on the cause chain (the one {@link Disposition#of} answers by) is a
   * {@link DedupInProgressException} of a nested call for another key that another owner holds, a
   * {@link DedupStoreUnavailableException} (the database unreachable) or a {@link
   * DedupExecutorClosedException}. Counted, a record whose nested key another consumer held (a
   * crashed one: for its whole lease) spent its attempts on its retries and was dead-lettered
   * although nothing had failed.
   *
   * <p>Anything else, and any {@code Error}, is recorded FAILED ({@link #fail(Throwable)}),
   * counting the attempt, though the adapter may hold the record for its own {@link
   * Disposition#RETRY_LATER}: in progress on the claim's own key, or held by this executor's own
   * owner id (a nested call on a key the handler's own claim, or an enclosing one, holds: it ends
   * only when the handler does), a {@link DedupConfigurationException}, any other {@link
   * DedupStoreException} (a missing table, a permission) or a {@link DedupLeaseLostException}. A
   * handler throwing one of those on every delivery would otherwise never count an attempt: run
   * again at every back-off, its effects applied each time, never dead-lettered, its partition
   * stalled; counted, it is dead-lettered once its attempts are spent. A claim in the caller's
   * transaction (mode TRANSACTIONAL) is failed there, whose rollback gives it back.
   *
   * <p>A claim that cannot be given back (the store unreachable, or anything else the release
   * throws but an {@code Error}, which goes on) is ended all the same and its lease no longer
   * renewed: it runs out, and a redelivery to this process takes the claim up before that; what the
   * release threw is added to {@code error} as suppressed.
   *
   * @return true if the claim was given back, false if it was recorded FAILED
   * @throws IllegalStateException the claim is a duplicate or was already ended
   */
  public boolean failOrRelease(Throwable error) {
    if (calls == null || !waitingCanHelp(error, List.of(key), calls.ownerId())) {
      fail(error);
      return false;
    }
    boolean open = isOpen();
    try {
      release();
    } catch (RuntimeException notReleased) {
      if (!open) {
        throw notReleased; // a duplicate, or ended already: nothing was done
      }
      if (notReleased != error) {
        error.addSuppressed(notReleased);
      }
    }
    return true;
  }

  /**
   * Ends each of {@code claims} after their handler, one call for them all, threw {@code error}, as
   * {@link #failOrRelease} ends one: given back in one store call when waiting can help (an
   * in-progress key must then be none of theirs), else each recorded FAILED whatever failing
   * another threw (the first throwable is thrown once all are ended). Claims already ended are
   * skipped. The claims are those of one executor, as one batch's are.
   *
   * @return true if the claims were given back, false if they were recorded FAILED
   */
  public static boolean failOrReleaseAll(List<DedupClaim> claims, Throwable error) {
    String ownerId = null;
    for (DedupClaim claim : claims) {
      ClaimCalls executorCalls = claim.calls != null ? claim.calls : claim.transactionCalls;
      if (executorCalls != null) {
        ownerId = executorCalls.ownerId();
        break;
      }
    }
    boolean release = waitingCanHelp(error, claims.stream().map(DedupClaim::key).toList(), ownerId);
    List<LeaseRenewer.Renewal> released = release ? new ArrayList<>(claims.size()) : List.of();
    ClaimCalls releasing = null;
    Throwable first = null;
    for (DedupClaim claim : claims) {
      try {
        if (!claim.isOpen()) {
          continue;
        }
        if (!release || claim.calls == null) {
          claim.fail(error);
          continue;
        }
        if (claim.endUnhandedOutcome()) {
          continue; // ended once already, its outcome not handed over: not to be given back
        }
        LeaseRenewer.Renewal renewal = claim.endForRelease();
        if (renewal != null) {
          released.add(renewal);
          releasing = claim.calls;
        }
      } catch (RuntimeException | Error e) {
        first = FirstFailure.of(first, e);
      }
    }
    if (releasing != null) {
      try {
        releasing.releaseRenewed(released);
      } catch (RuntimeException notReleased) {
        // Ended, their leases no longer renewed: see failOrRelease.
        if (notReleased != error) {
          error.addSuppressed(notReleased);
        }
      } catch (Error e) {
        first = FirstFailure.of(first, e);
      }
    }
    if (first instanceof Error fatal) {
      throw fatal;
    }
    if (first != null) {
      throw (RuntimeException) first;
    }
    return release;
  }

  /**
   * Whether waiting can let a handler that threw {@code error}, holding claims on {@code heldKeys},
   * succeed on a later delivery ({@link #failOrRelease}). An in-progress key held by {@code
   * ownerId} (this executor) or among {@code heldKeys} is the handler's own doing, not another
   * consumer's: it is released only when the handler ends, so waiting for it never ends.
   */
  private static boolean waitingCanHelp(
      Throwable error, List<DedupKey> heldKeys, @Nullable String ownerId) {
    if (error instanceof Error) {
      return false;
    }
    DedupException answering = Disposition.firstDedupException(error);
    if (answering instanceof DedupInProgressException inProgress) {
      return inProgress.key().filter(inner -> !heldKeys.contains(inner)).isPresent()
          && !inProgress.holder().equals(ownerId);
    }
    return answering instanceof DedupStoreUnavailableException
        || answering instanceof DedupExecutorClosedException;
  }

  /** Whether this claim is held and not ended yet. */
  boolean isOpen() {
    return held && !ended.get();
  }

  /**
   * Records FAILED, so that the next delivery retries: the handler threw {@code error}. If FAILED
   * cannot be written yet, it is retried in the background and the store's error is added to {@code
   * error} as suppressed, as is what the listener throws on hearing of it. In the caller's
   * transaction (mode TRANSACTIONAL) the record is marked FAILED in that transaction: its rollback
   * removes the record, and a caller that commits anyway leaves it FAILED for the next delivery.
   *
   * @throws IllegalStateException the claim is a duplicate or was already ended
   */
  public void fail(Throwable error) {
    end("fail");
    if (outcomes == null || renewal == null) {
      if (inTransaction != null && transactionCalls != null) {
        // Left SUCCESS, a caller that catches the failure and commits (a handler applying several
        // keys in one transaction, going on past one that failed) committed the key as applied:
        // never retried, its action lost.
        failedInTransaction = true;
        transactionCalls.failInTransaction(inTransaction, error);
      }
      AfterCommit.tellOfTry(() -> Outcomes.tellFailed(listener, key, attempt, error));
      return;
    }
    try {
      FaultPoints.reached(FaultPoints.Point.ENDING);
      outcomes.fail(key, attempt, source, renewal, error);
    } catch (Error e) {
      // FAILED is written now, or kept (see handOverAgain); then the handler's exception goes on,
      // as when FAILED cannot be written yet.
      if (!handOverAgain(e, outcomes, renewal, (o, r) -> o.fail(key, attempt, source, r, error))) {
        throw e;
      }
      if (e != error) {
        error.addSuppressed(e);
      }
    }
  }

  /**
   * For a caller that commits the transaction of a claim in it (mode TRANSACTIONAL) before it ends
   * the claim: refuses that commit if the database rolled the transaction back under the handler,
   * the claim's record with it (InnoDB at a deadlock the handler caught), while the handler's later
   * writes went on in a new transaction on the same connection, whose commit would succeed. Call it
   * in the transaction, before its commit. Does nothing for a claim not in the caller's transaction
   * or already completed; a claim failed in it is checked, since its caller may commit anyway.
   *
   * @throws IllegalStateException the transaction no longer holds the claim's record: roll it back,
   *     and end the claim with {@link #fail(Throwable)}
   */
  public void requireHeldBeforeCommit() {
    // A claim failed in the transaction is checked too: a caller may commit on a failure (Spring's
    // @Transactional does on a checked exception), and if the database rolled the transaction back
    // under the handler that commit carries its later writes alone, with no FAILED row to retry by.
    if ((!ended.get() || failedInTransaction)
        && inTransaction != null
        && transactionCalls != null) {
      transactionCalls.requireHeldInTransaction(inTransaction);
      heldAtCommit = true;
    }
  }

  /**
   * Refuses to pass a claim in the caller's transaction whose record the database rolled back under
   * its handler: committed, the record was passed as applied with no record, and applied again on
   * its next delivery.
   */
  private void requireHeldInTransaction() {
    if (inTransaction == null || transactionCalls == null || heldAtCommit) {
      return;
    }
    try {
      transactionCalls.requireHeldInTransaction(inTransaction);
    } catch (RuntimeException | Error e) {
      AfterCommit.tellOfTry(() -> Outcomes.tellFailed(listener, key, attempt, e));
      throw e;
    }
  }

  /**
   * An {@code Error} (an OutOfMemoryError as the outcome was allocated) between the end of this
   * claim and its outcome being written, queued or kept: nothing was left to write it, and nothing
   * to end the claim again, while its lease went on being renewed for the executor's life, the key
   * PROCESSING and each of its deliveries "in progress". The outcome is written now, on the
   * caller's thread, as {@link #complete()} and {@link #fail} write it (or kept for the background
   * retry); if that fails as well before it is kept, the claim is open again, for its caller to
   * end. What the second try throws rides with {@code e}.
   *
   * @return whether the outcome is handed over
   */
  private boolean handOverAgain(
      Error e,
      Outcomes outcomes,
      LeaseRenewer.Renewal renewal,
      BiConsumer<Outcomes, LeaseRenewer.Renewal> write) {
    if (!handedOver(outcomes, renewal)) {
      try {
        FaultPoints.reached(FaultPoints.Point.ENDING);
        write.accept(outcomes, renewal);
      } catch (RuntimeException | Error again) {
        if (again != e) {
          e.addSuppressed(again);
        }
      }
    }
    if (handedOver(outcomes, renewal)) {
      return true;
    }
    unhandedOutcome = write;
    ended.set(false);
    return false;
  }

  /**
   * Ends a claim that {@link #complete()}, {@link #completeAsync()}, {@link
   * #completeWithNextClaim()} or {@link #fail(Throwable)} left open: its handler ran, but an {@code
   * Error} struck both tries to hand the outcome over. Given back as a claim whose handler never
   * ran ({@link DedupClaims#releaseUnended()}), it counted no attempt, and with an Error that
   * repeats each delivery ran the handler again, the record never dead-lettered; left open, its
   * lease was renewed for the executor's life, each delivery "in progress". The outcome is tried
   * once more: SUCCESS for a handler that returned (FAILED would have its record applied again),
   * FAILED for one that threw. If that cannot be handed over either, the lease is left to run out,
   * and the next delivery takes the key over as after a crash, which counts the attempt.
   *
   * @return whether the claim was such a claim, now ended; false for any other (nothing is done)
   */
  public boolean endUnhandedOutcome() {
    Outcomes writer = outcomes;
    LeaseRenewer.Renewal lease = renewal;
    BiConsumer<Outcomes, LeaseRenewer.Renewal> write = unhandedOutcome;
    if (write == null || writer == null || lease == null || !ended.compareAndSet(false, true)) {
      return false;
    }
    // Nothing is allocated before the try: this runs when memory is short, and an Error escaping
    // after the claim was marked ended would leave its lease renewed for the executor's life.
    Throwable lost = null;
    try {
      FaultPoints.reached(FaultPoints.Point.ENDING);
      write.accept(writer, lease);
    } catch (RuntimeException | Error e) {
      lost = e;
    } finally {
      if (!handedOver(writer, lease)) {
        lease.stop();
        try {
          log.warn(
              "The handler of {} (attempt {}) ran, but its outcome could not be handed over; its"
                  + " lease is left to run out, and the next delivery takes the key over, counting"
                  + " the attempt",
              DeliverySources.where(key, source),
              attempt,
              lost == null ? null : FailureTexts.loggable(lost));
        } catch (RuntimeException | Error unlogged) {
          // The lease runs out all the same.
        }
      }
    }
    return true;
  }

  /**
   * Whether this claim's outcome is written, refused, or kept or queued to be written. Read from
   * the outcome, not from the renewal: renewing is over too after {@link #stopRenewing()}, or once
   * a renewal found the record vanished, and an outcome taken for handed over then was never
   * written, its record applied again on the redelivery after the lease.
   */
  private boolean handedOver(Outcomes outcomes, LeaseRenewer.Renewal renewal) {
    // Listed first: a settle marks the outcome settled before it unlists it, so read in this order
    // the two cannot both miss an outcome settled in between.
    return outcomes.isPending(key) || renewal.isOutcomeSettled();
  }

  private void end(String operation) {
    if (!held) {
      throw new IllegalStateException(
          "Cannot " + operation + " a duplicate of " + key + ": the handler must not have run");
    }
    if (!ended.compareAndSet(false, true)) {
      throw new IllegalStateException("The claim on " + key + " was already ended");
    }
  }

  /** Whether {@link #complete()} or {@link #fail(Throwable)} was called. */
  public boolean isEnded() {
    return ended.get();
  }

  @Override
  public String toString() {
    return "DedupClaim{" + key + ", attempt " + attempt + (isDuplicate() ? ", duplicate}" : "}");
  }
}
