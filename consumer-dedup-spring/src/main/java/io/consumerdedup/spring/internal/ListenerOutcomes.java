package io.consumerdedup.spring.internal;

import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.internal.FirstFailure;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.kafka.core.KafkaResourceHolder;
import org.springframework.kafka.support.KafkaUtils;
import org.springframework.transaction.support.TransactionSynchronization;
import org.springframework.transaction.support.TransactionSynchronizationManager;

/**
 * The claim of the record a listener container is processing on this thread, until its outcome is
 * settled: SUCCESS or FAILED become durable only with the outcome of the transaction the listener
 * ran in. In a container transaction (Kafka's, or a database transaction manager on the container)
 * the outcome is written after the transaction, from the record interceptor's {@code afterRecord};
 * the after-rollback processor reports a rollback first, so a listener that returned normally but
 * whose transaction rolled back is recorded FAILED, and its redelivery runs it again. Whatever is
 * still open when the next record arrives, or when the consumer thread clears its state (after each
 * poll, and when the container stops), is settled then, so that no claim is left open: SUCCESS if
 * its listener returned with no transaction on the thread (its effects are committed, and the
 * record's offset may be too, so FAILED would run the next copy of its key again); FAILED if the
 * listener did not return, or returned inside a transaction whose end the container never reported
 * (it may have rolled back, and the redelivery must apply it).
 *
 * <p>One delivery of a record may hold several claims: a listener that calls several {@code
 * Idempotent} methods of other beans, one method with several keys, or such methods behind the
 * record interceptor's own claim. Each is settled with the record's transaction, together.
 */
public final class ListenerOutcomes {
  private static final Logger log = LoggerFactory.getLogger(ListenerOutcomes.class);

  /**
   * The first of the claims open for the record being delivered on this thread, all of one delivery
   * and chained through {@link Pending#next}: appending allocates nothing, so an {@code
   * OutOfMemoryError} cannot leave a claim unrecorded, PROCESSING under a lease renewed for as long
   * as the process lives.
   */
  private static final ThreadLocal<@Nullable Pending> PENDING = new ThreadLocal<>();

  private ListenerOutcomes() {}

  /** A claim held for one record, with what became of its listener and transaction. */
  public static final class Pending {
    private final ConsumerRecord<?, ?> record;
    private final DedupClaim claim;
    private final AttemptLimit attempts;
    private boolean listenerDone;
    private boolean returnedOutsideTransaction;
    private @Nullable Throwable listenerError;
    private @Nullable Throwable rollback;
    private @Nullable SuccessMarks marks;
    private @Nullable String source;
    private @Nullable IdempotentExecutor executor;

    /** The claim deferred after this one for the same delivery of its record (or batch). */
    private @Nullable Pending next;

    /**
     * The batch whose delivery this claim waits for ({@link #deferToBatch}), the list object the
     * container's batch interceptor saw; null for a claim that waits for its record.
     */
    private @Nullable List<?> batch;

    /** Whether the batch listener returned, or threw, inside the batch's transaction. */
    private boolean batchHandedOver;

    /** Who made {@link #claim}, and the fingerprint it was made with ({@link #claimedBy}). */
    private @Nullable IdempotentExecutor claimant;

    private @Nullable String fingerprint;

    /** Whether {@link #settle} found the outcome a success; null until it ran. Guarded by this. */
    private @Nullable Boolean succeeded;

    /** What waits for {@link #succeeded} ({@link #whenSucceeded}). Guarded by this. */
    private final List<Runnable> onSuccess = new ArrayList<>();

    private Pending(ConsumerRecord<?, ?> record, DedupClaim claim, AttemptLimit attempts) {
      this.record = record;
      this.claim = claim;
      this.attempts = attempts;
    }

    /**
     * {@code executor} made the claim for a payload of {@code fingerprint}: a later call of the
     * same batch with the same key ({@link #batchCall}) is of the same claim only if so.
     */
    public Pending claimedBy(IdempotentExecutor executor, @Nullable String fingerprint) {
      this.claimant = executor;
      this.fingerprint = fingerprint;
      return this;
    }

    /**
     * Whether the call, or the last call, made under this claim returned and nothing it did was
     * rolled back so far: its effects go with the batch's transaction.
     */
    public boolean appliedSoFar() {
      return listenerDone && listenerError == null && rollback == null;
    }

    /** The claim this call, and any later call of its key in the same batch, runs under. */
    public DedupClaim claim() {
      return claim;
    }

    /**
     * The method runs again under this claim, a later call of its key in the same batch after this
     * call failed: the outcome is that of the last call, as the listener caught the earlier one's
     * failure and the transaction commits what the last one did.
     */
    public Pending again() {
      listenerDone = false;
      returnedOutsideTransaction = false;
      listenerError = null;
      rollback = null;
      return this;
    }

    /**
     * SUCCESS is to be written in the background by {@code executor}, grouped with the marks of
     * other records, and {@code marks} holds back the consumer's offset commits until it is
     * durable.
     */
    public Pending markInBackground(
        SuccessMarks marks, String source, IdempotentExecutor executor) {
      this.marks = marks;
      this.source = source;
      this.executor = executor;
      return this;
    }

    /** The listener returned normally; called on the thread that ran it, as it returns. */
    public void listenerSucceeded() {
      listenerDone = true;
      // No transaction of the container (Kafka's binds a resource without synchronization, a
      // database one both): what the listener did is committed already.
      returnedOutsideTransaction =
          !TransactionSynchronizationManager.isSynchronizationActive()
              && TransactionSynchronizationManager.getResourceMap().isEmpty();
    }

    /**
     * The listener threw; or, once it has returned, what failed after it, which is not its failure
     * and is ignored: passing on its acknowledgment (under {@code MANUAL_IMMEDIATE} a commit, which
     * fails once the consumer has left its group), an interceptor's {@code success}. Recorded
     * FAILED, the redelivery ran a listener whose effects were applied a second time; a transaction
     * they were in that then rolls back is reported as such ({@link #rolledBack}).
     */
    public void listenerFailed(Throwable error) {
      if (listenerDone && listenerError == null) {
        return;
      }
      listenerDone = true;
      listenerError = error;
    }

    /**
     * The container moved on without reporting the end of the record: a listener that returned
     * outside any transaction is done and its effects are committed, so it is recorded SUCCESS;
     * otherwise its transaction may have rolled back, or it never returned, and FAILED leaves the
     * key to the redelivery.
     */
    private void abandoned() {
      if (listenerDone && returnedOutsideTransaction) {
        return;
      }
      String delivery = batch == null ? "record" : "batch";
      rolledBack(
          new IllegalStateException(
              listenerDone
                  ? "the container never reported the end of the "
                      + delivery
                      + "'s transaction (an Error after the listener returned, or its producer was"
                      + " fenced)"
                  : "the container never reported the end of the "
                      + delivery
                      + " (the listener threw an Error, or the consumer stopped)"));
    }

    /**
     * No outcome is written: the listener's future was cancelled, and the work behind it may still
     * run. The lease is no longer renewed, so the redelivery takes the key over once it has run
     * out, as after a crash; FAILED would have it run the listener at once, beside that work.
     */
    public void leaveToLease() {
      // First: an Error after it (memory short) still leaves the lease to run out.
      claim.stopRenewing();
      decided(false);
    }

    /** The transaction the listener ran in did not commit. */
    public void rolledBack(Throwable cause) {
      if (rollback == null) {
        rollback = cause;
      }
    }

    /**
     * Runs {@code action} once the outcome is settled as a success, at once if it was, never if it
     * failed: for an acknowledgment made from another thread after the listener returned, in a
     * Kafka transaction whose commit may still fail. Passed on at once, spring-kafka committed it
     * outside that transaction, past the record its after-rollback processor had sought back.
     */
    public void whenSucceeded(Runnable action) {
      synchronized (this) {
        if (succeeded == null) {
          onSuccess.add(action);
          return;
        }
        if (!succeeded) {
          return;
        }
      }
      action.run();
    }

    /**
     * Passes on an acknowledgment made after the listener returned, now that its transaction
     * committed. One that spring-kafka refuses (under {@code MANUAL_IMMEDIATE} it sends the offset
     * to a transaction that has ended) must not be reported as an outcome not written, nor keep the
     * others from being passed on: the record is applied, its SUCCESS written, and only its offset
     * waits for a later acknowledgment (after a restart it comes again as a duplicate).
     */
    private void passOnLate(Runnable acknowledgment) {
      try {
        acknowledgment.run();
      } catch (RuntimeException e) {
        log.warn(
            "{} is applied and recorded, but its acknowledgment, made after its listener returned,"
                + " could not be passed on: its offset is committed with a later record's, or it"
                + " comes again after a restart as a duplicate",
            KafkaUtils.format(record),
            e);
      }
    }

    private List<Runnable> decided(boolean success) {
      synchronized (this) {
        succeeded = success;
        List<Runnable> due = success ? List.copyOf(onSuccess) : List.of();
        onSuccess.clear();
        return due;
      }
    }

    /**
     * Writes the outcome: SUCCESS only if the listener returned and nothing rolled back, else
     * FAILED with the reason, logged as a failed attempt.
     *
     * @throws DedupException SUCCESS could not be written (not yet, or the lease was lost); never
     *     when it is written in the background, whose failure the consumer's next commit meets
     */
    public void settle() {
      if (claim.isEnded()) {
        return;
      }
      try {
        settleOpen();
      } catch (Error e) {
        // An Error at both of the claim's tries to hand the outcome over leaves it open: given
        // up by the poll as in use, its lease was renewed for the process's life, each delivery
        // of the record held "in progress" and never dead-lettered.
        claim.endUnhandedOutcome();
        throw e;
      }
    }

    private void settleOpen() {
      Throwable failure = failure();
      if (failure == null) {
        try {
          writeSuccess();
        } finally {
          decided(true).forEach(this::passOnLate);
        }
        return;
      }
      decided(false);
      if (listenerError != null) {
        // The listener threw: an exception that waiting can cure (a called method's key held by
        // another consumer) gives the claim back uncounted, as the error handler holds the record.
        attempts.listenerThrew(claim, listenerError);
        return;
      }
      try {
        attempts.logFailure(claim, failure);
      } finally {
        // An Error out of a log appender (an OutOfMemoryError, a StackOverflowError) must not keep
        // the failure from being written: the claim would stay PROCESSING under a renewed lease,
        // every delivery of its key refused as in progress elsewhere.
        claim.fail(failure);
      }
    }

    private void writeSuccess() {
      if (marks != null) {
        IdempotentExecutor writer = Objects.requireNonNull(executor);
        DedupKey key = claim.key();
        marks.add(
            record,
            key,
            Objects.requireNonNull(source),
            claim.completeAsync(),
            // As long as the poll loop waits for a poll's marks: the lease outlives it.
            writer.renewalInterval(),
            SuccessMarks.keptBy(writer, key));
      } else {
        claim.complete();
      }
    }

    private @Nullable Throwable failure() {
      if (listenerError != null) {
        return listenerError;
      }
      if (rollback != null) {
        return listenerDone
            ? new IllegalStateException(
                "The listener returned, but its transaction rolled back: " + rollback, rollback)
            : rollback;
      }
      return listenerDone ? null : new IllegalStateException("The listener never returned");
    }

    /** Settles, reporting a failure to write the outcome in the log instead of to the caller. */
    void settleQuietly() {
      try {
        settle();
      } catch (DedupException e) {
        // The core keeps an outcome it could not write and logs it; nothing more to do here.
        log.debug("Outcome of {} not written yet", KafkaUtils.format(record), e);
      } catch (RuntimeException e) {
        log.error("Could not record the outcome of {}", KafkaUtils.format(record), e);
      }
    }

    /**
     * Whether {@code other} was deferred in the same delivery of the record: spring-kafka hands the
     * same record object to the record interceptors and to the listener, and polls a new one when
     * it delivers the record again. A call given a copy of the record the container is delivering
     * (its value enriched, say) is of that delivery too: taken for another, it settled the claims
     * before it FAILED while their effects committed. A claim left from an earlier delivery of the
     * same offset is not: its record is no longer the one the container delivers. The calls a batch
     * listener makes are of its batch's delivery: the list the batch interceptor saw.
     */
    private boolean sameDelivery(Pending other) {
      return record == other.record
          || (batch != null && other.batch != null && sameRecords(batch, other.batch))
          || (isFor(other.record) && CurrentRecordInterceptor.current().orElse(null) == record);
    }

    boolean isFor(ConsumerRecord<?, ?> other) {
      return record.offset() == other.offset()
          && record.partition() == other.partition()
          && record.topic().equals(other.topic());
    }
  }

  /**
   * The claim held for {@code record}, its outcome yet to be settled by the caller; a failure is
   * logged against {@code attempts}. A claim in the caller's transaction is checked before that
   * transaction commits ({@link AbortedTransactionCheck}): its outcome is written only after it.
   */
  public static Pending pending(
      ConsumerRecord<?, ?> record, DedupClaim claim, AttemptLimit attempts) {
    AbortedTransactionCheck.hold(claim);
    return new Pending(
        Objects.requireNonNull(record),
        Objects.requireNonNull(claim),
        Objects.requireNonNull(attempts));
  }

  /**
   * Leaves {@code pending} to be settled by {@link #afterRecord} once the container is done with
   * its record, transaction included, with the other claims deferred in the same delivery of that
   * record (a listener calling several {@code Idempotent} methods). Claims still open from another
   * record, or from an earlier delivery of this one, are settled first, as {@link #abandon()} does.
   */
  public static void deferToContainer(Pending pending) {
    Pending first = PENDING.get();
    if (first != null && first.sameDelivery(pending)) {
      Pending last = first;
      while (last != pending && last.next != null) {
        last = last.next;
      }
      if (last != pending) {
        last.next = pending;
      }
      return;
    }
    // Recorded first: an Error settling the earlier claims (a log appender's OutOfMemoryError)
    // left this one unrecorded, open under a lease renewed for as long as the process lived.
    PENDING.set(pending);
    if (first != null) {
      settleEach(first, true);
    }
  }

  /**
   * Leaves {@code pending}, a claim made by a method that a batch listener called with a record of
   * {@code batch}, to be settled once the container is done with that batch, its transaction
   * included ({@link #afterBatch}), with the other claims of the batch's calls: spring-kafka runs
   * no record interceptor for a batch, so there is no record's end to wait for.
   */
  public static void deferToBatch(Pending pending, List<?> batch) {
    pending.batch = Objects.requireNonNull(batch);
    deferToContainer(pending);
  }

  /**
   * Whether {@code one} and {@code other} hold the same records, in the same order: spring-kafka
   * hands the batch interceptor a new list when its error handler runs the listener again in memory
   * (a {@code FallbackBatchErrorHandler}), within the same poll and transaction; taken for another
   * delivery, that retry's calls recorded the first try's claims FAILED while their effects were
   * about to commit with the batch.
   */
  private static boolean sameRecords(List<?> one, List<?> other) {
    if (one == other) {
      return true;
    }
    if (one.size() != other.size()) {
      return false;
    }
    for (int i = 0; i < one.size(); i++) {
      if (!(one.get(i) instanceof ConsumerRecord<?, ?> a)
          || !(other.get(i) instanceof ConsumerRecord<?, ?> b)
          || a.offset() != b.offset()
          || a.partition() != b.partition()
          || !a.topic().equals(b.topic())) {
        return false;
      }
    }
    return true;
  }

  /**
   * The claim an earlier call made with {@code key} in the batch delivering {@code record} on this
   * thread, in a Kafka transaction of its container, by the same {@code executor}; null if none, or
   * if the two fingerprints differ (the store tells that conflict). That call's effects commit or
   * roll back with this call's, in the same transaction: asking the store instead found the key
   * PROCESSING, held by this very batch, and the batch failed as "in progress" at each delivery
   * until its attempts were spent (a producer's retry next to its original in one poll).
   */
  public static @Nullable Pending batchCall(
      ConsumerRecord<?, ?> record,
      DedupKey key,
      IdempotentExecutor executor,
      @Nullable String fingerprint) {
    Pending first = batchPending();
    if (first == null || CurrentRecordInterceptor.isCurrent(record)) {
      return null;
    }
    List<?> batch = CurrentBatch.batchOf(record);
    if (batch == null || !sameRecords(batch, Objects.requireNonNull(first.batch))) {
      return null;
    }
    for (Pending pending = first; pending != null; pending = pending.next) {
      if (pending.claimant == executor
          && (pending.fingerprint == null
              || fingerprint == null
              || pending.fingerprint.equals(fingerprint))
          && pending.claim.key().equals(key)
          && !pending.claim.isEnded()) {
        return pending;
      }
    }
    return null;
  }

  /** The claims deferred to the batch being delivered on this thread, or null. */
  private static @Nullable Pending batchPending() {
    Pending first = PENDING.get();
    return first != null && first.batch != null ? first : null;
  }

  /**
   * The batch listener returned or threw, inside the batch's transaction (the batch interceptor's
   * {@code success} or {@code failure}): what comes after is that transaction's commit, or its
   * rollback, which the after-rollback processor reports ({@link #batchRolledBack}).
   */
  public static void batchHandedOver() {
    for (Pending pending = batchPending(); pending != null; pending = pending.next) {
      pending.batchHandedOver = true;
    }
  }

  /**
   * The transaction of the batch being delivered on this thread rolled back: every claim its calls
   * made is recorded FAILED now, before the batch comes again.
   */
  public static void batchRolledBack(Throwable cause) {
    Pending first = batchPending();
    if (first != null) {
      PENDING.remove();
      for (Pending pending = first; pending != null; pending = pending.next) {
        pending.rolledBack(cause);
      }
      settleEach(first, false);
    }
  }

  /**
   * The container is done with the batch (the consumer thread clears its state after the poll), its
   * transaction included: a claim whose listener was handed over and whose rollback was not
   * reported went with a transaction that committed, and is recorded SUCCESS; one of a batch the
   * container never reported on (an {@code Error} out of the listener) is FAILED.
   */
  public static void afterBatch() {
    Pending first = batchPending();
    if (first != null) {
      PENDING.remove();
      settleEach(first, !first.batchHandedOver);
    }
  }

  /**
   * A claim whose settling threw before it was ended (an {@code OutOfMemoryError} as the reason it
   * was abandoned was made): no outcome can be told, so its lease runs out, as after a crash;
   * renewed, every delivery of its key was held "in progress" for as long as the process lived.
   */
  private static void leaveToLeaseIfOpen(Pending pending) {
    try {
      if (!pending.claim.isEnded()) {
        pending.leaveToLease();
      }
    } catch (RuntimeException | Error e) {
      // The first failure is thrown by the caller; this one can only be dropped.
    }
  }

  /**
   * Settles {@code first} and the claims chained after it, each whatever settling another threw,
   * then throws the first {@code Error}: one left unsettled stayed PROCESSING under a lease renewed
   * for as long as the process lived. With {@code abandoned}, the container never reported the end
   * of their record.
   */
  private static void settleEach(Pending first, boolean abandoned) {
    Throwable thrown = null;
    for (Pending pending = first; pending != null; pending = pending.next) {
      try {
        if (abandoned) {
          pending.abandoned();
        }
        pending.settleQuietly();
      } catch (RuntimeException | Error e) {
        thrown = FirstFailure.of(thrown, e);
        leaveToLeaseIfOpen(pending);
      }
    }
    if (thrown instanceof Error error) {
      throw error;
    }
    if (thrown != null) {
      throw (RuntimeException) thrown;
    }
  }

  /**
   * The first claim open for {@code record} on this thread, if any: the record interceptor's own,
   * which it made before the listener ran.
   */
  public static @Nullable Pending current(ConsumerRecord<?, ?> record) {
    Pending pending = PENDING.get();
    return pending != null && pending.isFor(record) ? pending : null;
  }

  /**
   * The listener of {@code record} returned normally, on this thread; for a caller that goes on
   * with the record before the container hears of it (passing on its acknowledgment).
   */
  public static void listenerReturned(ConsumerRecord<?, ?> record) {
    for (Pending pending = current(record); pending != null; pending = pending.next) {
      pending.listenerSucceeded();
    }
  }

  /**
   * The transaction of the record being processed on this thread rolled back: every claim made in
   * it is FAILED, the first call's as much as the one that threw.
   */
  public static void rolledBack(ConsumerRecord<?, ?> record, Throwable cause) {
    for (Pending pending = current(record); pending != null; pending = pending.next) {
      pending.rolledBack(cause);
    }
  }

  /**
   * The container is done with {@code record}, its transaction included: writes the outcome of each
   * of its claims.
   */
  public static void afterRecord(ConsumerRecord<?, ?> record) {
    Pending pending = current(record);
    if (pending != null) {
      PENDING.remove();
      settleEach(pending, false);
    }
  }

  /**
   * Settles any claim still open on this thread, the container having moved on without reporting
   * the end of its record: SUCCESS if its listener returned with no transaction on the thread, else
   * FAILED.
   */
  public static void abandon() {
    abandon(null);
  }

  /**
   * Settles, as {@link #abandon()} does, the claims still open on this thread for another record
   * than {@code record}.
   */
  public static void abandonOtherThan(ConsumerRecord<?, ?> record) {
    abandon(record);
  }

  private static void abandon(@Nullable ConsumerRecord<?, ?> keep) {
    Pending pending = PENDING.get();
    if (pending != null && (keep == null || !pending.isFor(keep))) {
      PENDING.remove();
      settleEach(pending, true);
    }
  }

  /**
   * No offset commit of the consumer delivering {@code record} passes it until it comes again and
   * its transaction commits, or the consumer's position passes it ({@link
   * SuccessMarks#rolledBack}).
   */
  private static void holdCommitsAt(ConsumerRecord<?, ?> record) {
    ConsumerPoll poll = CurrentRecordInterceptor.pollOf(record);
    if (poll != null) {
      poll.marks().rolledBack(record);
    }
  }

  /** Settles {@code pending}, whose transaction committed. */
  private static void settleCommitted(Pending pending) {
    try {
      pending.settle();
    } catch (RuntimeException | Error e) {
      // The offset commit spring-kafka made inside the transaction is sent after every
      // afterCommit, this failure or not (PollAwareConsumer): it must not pass the record.
      holdCommitsAt(pending.record);
      throw e;
    }
  }

  /**
   * Whether the listener on this thread runs inside a Kafka transaction of its container, whose
   * commit comes after the listener returns.
   */
  public static boolean inKafkaTransaction() {
    // KafkaTransactionManager binds its producer but runs without transaction synchronization.
    // Asked for every record: a loop, not a stream, over what is most often an empty map.
    for (Object resource : TransactionSynchronizationManager.getResourceMap().values()) {
      if (resource instanceof KafkaResourceHolder<?, ?>) {
        return true;
      }
    }
    return false;
  }

  /**
   * Settles {@code pending} when the Spring transaction on this thread completes: SUCCESS only
   * after a commit, written from {@code afterCommit} so that a SUCCESS that cannot be written
   * reaches the committer (and the container holds the record); FAILED after a rollback. With
   * {@code settleOnCompletion} false (a container transaction settles it later) only a rollback is
   * noted.
   */
  public static void afterTransaction(Pending pending, boolean settleOnCompletion) {
    TransactionSynchronizationManager.registerSynchronization(
        new TransactionSynchronization() {
          private boolean afterCommitCalled;

          @Override
          public void afterCommit() {
            afterCommitCalled = true;
            if (settleOnCompletion) {
              settleCommitted(pending);
            }
          }

          @Override
          public void afterCompletion(int status) {
            if (status == STATUS_COMMITTED) {
              if (settleOnCompletion && !afterCommitCalled) {
                // A synchronization before this one threw in its afterCommit (a hook of the
                // application's own), and Spring calls no later afterCommit. The transaction did
                // commit: left unsettled, the claim stayed PROCESSING under a lease renewed for
                // as long as the process lived, and the redelivery that the failure brought was
                // told "in progress" at each try.
                try {
                  settleCommitted(pending);
                } catch (DedupException e) {
                  // The core keeps a SUCCESS it could not write and logs it.
                  log.debug("Outcome of {} not written yet", KafkaUtils.format(pending.record), e);
                }
              }
              return;
            }
            pending.rolledBack(
                new IllegalStateException(
                    status == STATUS_ROLLED_BACK
                        ? "transaction rolled back"
                        : "transaction outcome unknown"));
            if (settleOnCompletion) {
              pending.settleQuietly();
            }
          }
        });
  }
}
