package io.consumerdedup.kafka;

import io.consumerdedup.core.DedupAttemptsExhaustedException;
import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupClaims;
import io.consumerdedup.core.DedupHandlerException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupKeyMalformedException;
import io.consumerdedup.core.DedupKeyMissingException;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.core.internal.FailureTexts;
import io.consumerdedup.core.internal.FaultPoints;
import io.consumerdedup.kafka.internal.RecordKeyResolver;
import java.time.Duration;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Function;
import java.util.function.Supplier;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Makes a plain kafka-clients record handler idempotent: derives the record's business key, and
 * runs the handler through the {@link IdempotentExecutor}, so each business action is applied once
 * however often Kafka delivers it.
 *
 * <pre>{@code
 * IdempotentRecordHandler<String, String> payments = IdempotentRecordHandler
 *     .<String, String>builder(executor)
 *     .bizType("payment")
 *     .key(KeyExtractors.header("order-no"))
 *     .handler(record -> charge(record.value()))
 *     .build();
 * Outcome outcome = payments.handle(record);   // PROCESSED or DUPLICATE
 * }</pre>
 *
 * <p>{@link #handle(ConsumerRecord)} throws what the executor throws (see {@link
 * IdempotentExecutor#execute}); {@link DedupPollLoop} shows what to do with each. As a {@link
 * RecordProcessor} it also tells the loop how often a record's action was attempted, from the dedup
 * table, so the count survives restarts and moves between consumers; and under a loop it does not
 * run the handler on a claim beyond the loop's {@code maxAttempts}: it gives the claim back and
 * throws {@link DedupAttemptsExhaustedException}, which the loop dead-letters at once.
 */
public final class IdempotentRecordHandler<K, V> implements RecordProcessor<K, V> {

  /** Default policy for records without a key: refuse them. */
  public static final MissingKeyPolicy DEFAULT_MISSING_KEY_POLICY = MissingKeyPolicy.FAIL;

  private static final Logger log = LoggerFactory.getLogger(IdempotentRecordHandler.class);

  private final IdempotentExecutor executor;
  private final RecordKeyResolver<K, V> keys;
  private final RecordHandler<K, V> handler;
  private final @Nullable Function<ConsumerRecord<K, V>, String> fingerprint;
  private final boolean claimsPerPoll;

  /**
   * The poll being processed, between {@link #prepare} and {@link #settle}, per poll thread: one
   * handler may serve several loops.
   */
  @SuppressWarnings("ThreadLocalUsage") // per handler on purpose: its own poll, per loop thread
  private final ThreadLocal<@Nullable Poll<K, V>> poll = new ThreadLocal<>();

  private IdempotentRecordHandler(Builder<K, V> builder) {
    this.executor = builder.executor;
    this.keys =
        new RecordKeyResolver<>(
            Objects.requireNonNull(builder.bizType, "bizType is required"),
            Objects.requireNonNull(builder.keyExtractor, "key extractor is required"),
            builder.missingKeyPolicy,
            builder.groupId,
            executor.listener());
    this.handler = Objects.requireNonNull(builder.handler, "handler is required");
    this.fingerprint = builder.fingerprint;
    this.claimsPerPoll = builder.claimsPerPoll;
  }

  public static <K, V> Builder<K, V> builder(IdempotentExecutor executor) {
    return new Builder<>(executor);
  }

  /** How long the executor keeps a key's SUCCESS; a record read again later is applied again. */
  Duration successRetention() {
    return executor.successRetention();
  }

  /**
   * Handles one record at most once per business key.
   *
   * @return PROCESSED if the handler ran, DUPLICATE if the key had already succeeded
   * @throws DedupKeyMissingException the record has no usable key and the policy is FAIL (a {@link
   *     DedupKeyMalformedException} if it has one that cannot be used, whatever the policy, or the
   *     key extractor or fingerprint function throws)
   * @throws io.consumerdedup.core.DedupInProgressException another consumer is working on the key;
   *     retry the record later
   */
  public Outcome handle(ConsumerRecord<K, V> record) {
    String source = keys.source(record);
    Optional<DedupKey> key = derived(record, "key extractor", () -> keys.resolve(record));
    if (key.isEmpty()) {
      runUnprotected(record, source);
      return Outcome.PROCESSED;
    }
    String print = fingerprintOf(record);
    return executor
        .execute(
            key.get(),
            print,
            source,
            () -> {
              handler.handle(record);
              return null;
            })
        .outcome();
  }

  /**
   * As {@link #handle(ConsumerRecord)}, for a poll's records between {@link #prepare} and {@link
   * #settle()}: the record's claim is the one {@link #prepare} made (or, for a record it did not
   * claim, one made now), and its SUCCESS is written in the background, grouped with the marks of
   * other records; {@link #settle()} waits for them (under {@link DedupPollLoop}, the loop does).
   * Claimed one by one ({@code claimsPerPoll(false)}), a record's SUCCESS is written in the same
   * commit as the next record's claim ({@link DedupClaim#completeWithNextClaim()}), before the next
   * record's handler runs: one commit per record, and a crash re-runs at most the record in hand.
   * Outside a poll (no {@link #prepare} on this thread), it is {@link #handle(ConsumerRecord)}.
   */
  @Override
  public Outcome process(ConsumerRecord<K, V> record) {
    Poll<K, V> current = poll.get();
    if (current == null) {
      return handle(record);
    }
    Integer index = current.claims == null ? null : current.indexes.get(record);
    if (index == null) {
      return processOnItsOwn(record, current);
    }
    DedupClaim claim = Objects.requireNonNull(current.claims).get(index);
    if (claim.isDuplicate()) {
      return Outcome.DUPLICATE;
    }
    if (claim.isLeaseLost()) {
      // Claimed with the poll, but its lease ran out unrenewed since (the database away, a long
      // handler of an earlier record) or was taken over: another consumer may be running the key.
      // Claimed again alone, which says whether it may run; this claim goes back at settle().
      log.info(
          "The claim of {} made with its poll lost its lease before its record was reached;"
              + " claiming it again",
          claim.source());
      return processOnItsOwn(record, current);
    }
    return run(record, claim, current, false);
  }

  /** A record of the poll that {@link #prepare} did not claim: claimed now, marked later. */
  private Outcome processOnItsOwn(ConsumerRecord<K, V> record, Poll<K, V> current) {
    String source = keys.source(record);
    Optional<DedupKey> key = derived(record, "key extractor", () -> keys.resolve(record));
    if (key.isEmpty()) {
      runUnprotected(record, source);
      return Outcome.PROCESSED;
    }
    String print = fingerprintOf(record);
    DedupClaim claim;
    try {
      claim = executor.claim(key.get(), print, source);
    } catch (Error e) {
      // The claim's, not the handler's (an OutOfMemoryError as its answer was read): counted by
      // the loop as the handler's failed attempt, it spent the record's attempts and dead-lettered
      // it without its retry ever running.
      ErrorsBesideHandlers.note(e);
      throw e;
    }
    if (claim.isDuplicate()) {
      return Outcome.DUPLICATE;
    }
    // The claim above carried the previous record's SUCCESS, unless it went its own way (the
    // writer took it after a pause, or the keys are the same): its handler has applied its effect,
    // so this one waits for that mark, and a crash re-runs one record. A mark that fails is the
    // poll's to report (settle), and holds its record there; it does not stop this one.
    current.awaitLastMark(executor.renewalInterval());
    return run(record, claim, current, true);
  }

  /**
   * Runs the handler under a held claim; FAILED is written at once, SUCCESS in the background:
   * grouped with other records' marks by the writer, or, for a record claimed on its own ({@code
   * withNextClaim}), with the next record's claim.
   */
  private Outcome run(
      ConsumerRecord<K, V> record, DedupClaim claim, Poll<K, V> current, boolean withNextClaim) {
    DedupAttemptsExhaustedException spent = LoopAttemptLimit.spent(claim, executor);
    if (spent != null) {
      throw spent;
    }
    try {
      handler.handle(record);
    } catch (RuntimeException | Error e) {
      failClaim(claim, e);
      throw e;
    } catch (Exception e) {
      if (e instanceof InterruptedException) {
        Thread.currentThread().interrupt(); // for the loop, which stops on it
      }
      failClaim(claim, e);
      throw new DedupHandlerException(claim.key(), claim.source(), e);
    }
    try {
      FaultPoints.reached(FaultPoints.Point.AFTER_HANDLER);
      CompletableFuture<Void> written =
          withNextClaim ? claim.completeWithNextClaim() : claim.completeAsync();
      current.lastMark = written;
      MarksInFlight loop = MarksInFlight.open();
      (loop != null ? loop : current.marks).add(record, written, executor.renewalInterval());
    } catch (Error e) {
      afterHandler(claim, e);
      throw e;
    }
    return Outcome.PROCESSED;
  }

  /**
   * Records the handler's failure, or gives the claim back uncounted for an exception that waiting
   * can cure, which the loop holds the record for ({@link DedupClaim#failOrRelease}). A claim left
   * open by an {@code Error} at both tries to hand FAILED over is failed once more: left open, a
   * claim of the poll was given back at settle() with no attempt counted, one claimed on its own
   * was renewed for the executor's life, and with an Error that repeats the record was never
   * dead-lettered.
   */
  private static void failClaim(DedupClaim claim, Throwable failure) {
    try {
      claim.failOrRelease(failure);
    } catch (Error e) {
      claim.endUnhandedOutcome();
      throw e;
    }
  }

  /**
   * An {@code Error} after the handler returned (an OutOfMemoryError as its SUCCESS was queued): no
   * failure of the handler, whose effects are applied. Counted as one, it dead-lettered the record
   * at its last attempt; and its claim, left open, was given back at settle() as if the handler had
   * never run, so the next delivery ran it again. SUCCESS is written now, if it is not on its way
   * yet; the loop ends on the Error and the next one finds the record a duplicate.
   */
  private static void afterHandler(DedupClaim claim, Error e) {
    ErrorsBesideHandlers.note(e);
    if (claim.isEnded()) {
      return;
    }
    try {
      claim.complete();
    } catch (RuntimeException | Error notWritten) {
      // Kept and retried in the background, or the lease lost: the next delivery finds out.
      e.addSuppressed(notWritten);
    }
    // The Error struck this try too: an Error that repeats. Left open, the claim was given back
    // at settle() as if its handler had never run, or renewed for the executor's life.
    claim.endUnhandedOutcome();
  }

  /**
   * Starts a poll on this thread: {@link #process} then writes SUCCESS marks in the background
   * until {@link #settle()}. Unless built with {@code claimsPerPoll(false)}, also claims the keys
   * of the poll's records in one round trip. Records without a usable key, or whose fingerprint
   * cannot be computed, are left to {@link #process}, which fails them as {@link #handle} does. If
   * the store cannot be reached, nothing is claimed and each record is claimed when processed.
   */
  @Override
  public void prepare(List<ConsumerRecord<K, V>> records) {
    settle(); // a poll left unsettled by a caller that skipped it
    ErrorsBesideHandlers.clear(); // one noted in a poll whose loop did not ask
    Poll<K, V> current = new Poll<>();
    poll.set(current);
    if (!claimsPerPoll) {
      return;
    }
    List<IdempotentExecutor.Delivery> deliveries = new ArrayList<>(records.size());
    for (ConsumerRecord<K, V> record : records) {
      try {
        Optional<DedupKey> key = derived(record, "key extractor", () -> keys.claimedKey(record));
        if (key.isPresent()) {
          String print = fingerprintOf(record);
          deliveries.add(new IdempotentExecutor.Delivery(key.get(), print, keys.source(record)));
          current.indexes.put(record, deliveries.size() - 1);
        }
      } catch (RuntimeException e) {
        // process() meets the same failure, and reports it for this record alone.
      }
    }
    if (deliveries.isEmpty()) {
      return;
    }
    try {
      current.claims = executor.claimAhead(deliveries);
    } catch (DedupStoreException e) {
      current.indexes.clear();
      log.debug("Claiming {} keys together failed; claiming them one by one", deliveries.size(), e);
    }
  }

  /**
   * Ends the poll: gives back the claims of the poll's records that were not processed, without
   * counting an attempt, and waits until the SUCCESS marks of those processed are written, at most
   * one lease renewal interval of the executor (the leases outlive the wait). Under {@link
   * DedupPollLoop} the loop waits for the marks itself, after it has fetched and claimed its next
   * poll, and this returns at once. Call it before committing the poll's offsets: a record whose
   * offset is committed before its SUCCESS is written is applied again if the process dies in
   * between and another consumer takes its key over.
   *
   * @return the processed records whose SUCCESS is not written yet (the database unreachable, the
   *     key taken over meanwhile, or the wait over); they must be delivered again, and this process
   *     writes a SUCCESS still pending before it runs the key's handler again
   */
  @Override
  public List<ConsumerRecord<K, V>> settle() {
    Poll<K, V> current = poll.get();
    poll.remove();
    if (current == null) {
      return List.of();
    }
    if (current.claims != null) {
      current.claims.releaseUnended();
    }
    executor.flushMarks(); // the last record's SUCCESS: no next claim comes to take it
    return current.marks.await(log);
  }

  /** A poll between {@link #prepare} and {@link #settle()} on one thread. */
  private static final class Poll<K, V> {
    /** The records claimed together, by their index among the claims. */
    final IdentityHashMap<ConsumerRecord<K, V>, Integer> indexes = new IdentityHashMap<>();

    /** The poll's claims, when its keys were claimed together. */
    @Nullable DedupClaims claims;

    /** The marks that {@link #settle()} waits for: those no loop waits for. */
    final MarksInFlight marks = new MarksInFlight();

    /** The SUCCESS of the record processed last, if it is written in the background. */
    @Nullable CompletableFuture<Void> lastMark;

    /** Waits until the last record's SUCCESS is written, or has failed, at most {@code max}. */
    void awaitLastMark(Duration max) {
      CompletableFuture<Void> last = lastMark;
      if (last == null || last.isDone()) {
        return;
      }
      try {
        last.get(max.toNanos(), TimeUnit.NANOSECONDS);
      } catch (ExecutionException | TimeoutException e) {
        // Not written (yet): the poll's settling reports it, and holds its record.
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }

  /**
   * The attempts the dedup table counts for the record's key ({@link DedupRecord#attempts()}):
   * every claim, by any consumer, including the one that just failed. Empty if the record has no
   * usable key, or the table has no record for it (in mode TRANSACTIONAL a failed attempt leaves
   * none).
   *
   * @throws DedupStoreException if the store cannot be read
   */
  @Override
  public OptionalInt attempts(ConsumerRecord<K, V> record) {
    Optional<DedupKey> key;
    try {
      key = derived(record, "key extractor", () -> keys.claimedKey(record));
    } catch (DedupKeyMalformedException e) {
      return OptionalInt.empty(); // no key, no record of attempts
    }
    if (key.isEmpty()) {
      return OptionalInt.empty();
    }
    return executor.store().find(key.get()).stream().mapToInt(DedupRecord::attempts).findFirst();
  }

  private @Nullable String fingerprintOf(ConsumerRecord<K, V> record) {
    Function<ConsumerRecord<K, V>, String> print = fingerprint;
    return print == null ? null : derived(record, "fingerprint", () -> print.apply(record));
  }

  /**
   * What the application's key extractor or fingerprint derives from the record. Whatever else they
   * throw (an {@code IllegalStateException}, an {@code AssertionError}, a {@code
   * NoClassDefFoundError}) comes again with every delivery of the record, before any claim, so no
   * attempt of it can be counted in the table: passed on as an Error, it would end every loop
   * started on the record without the record ever being dead-lettered, and, from {@link #prepare},
   * keep the poll's other records from being handled; passed on as a RuntimeException, the loop
   * would retry, as a handler failure, a record whose handler never ran. It is the key that cannot
   * be derived, so a {@link DedupKeyMalformedException}: dead-lettered at once, as the Spring
   * adapter does with a key expression that throws. Errors of the JVM itself ({@link
   * VirtualMachineError}: out of memory) say nothing about the record and pass on.
   */
  private <T> T derived(ConsumerRecord<K, V> record, String what, Supplier<T> derivation) {
    try {
      return derivation.get();
    } catch (DedupKeyMissingException | DedupKeyMalformedException | VirtualMachineError e) {
      throw e;
    } catch (RuntimeException | Error e) {
      throw new DedupKeyMalformedException(
          "The " + what + " of biz type '" + keys.bizType() + "' threw " + FailureTexts.describe(e),
          keys.source(record),
          e);
    }
  }

  private void runUnprotected(ConsumerRecord<K, V> record, String source) {
    try {
      handler.handle(record);
    } catch (RuntimeException e) {
      throw e;
    } catch (Exception e) {
      throw new DedupHandlerException(null, source, e);
    }
  }

  /** The biz type this handler deduplicates under. */
  public String bizType() {
    return keys.bizType();
  }

  /** Builds an {@link IdempotentRecordHandler}. */
  public static final class Builder<K, V> {
    private final IdempotentExecutor executor;
    private @Nullable String bizType;
    private @Nullable KeyExtractor<K, V> keyExtractor;
    private @Nullable RecordHandler<K, V> handler;
    private MissingKeyPolicy missingKeyPolicy = DEFAULT_MISSING_KEY_POLICY;
    private @Nullable Function<ConsumerRecord<K, V>, String> fingerprint;
    private @Nullable String groupId;
    private boolean claimsPerPoll = true;

    private Builder(IdempotentExecutor executor) {
      this.executor = Objects.requireNonNull(executor, "executor");
    }

    /**
     * The kind of action, such as {@code payment}; validated as {@link DedupKey} does. Required.
     */
    public Builder<K, V> bizType(String bizType) {
      DedupKey.of(bizType, "validation");
      this.bizType = bizType;
      return this;
    }

    /**
     * How to derive the business key. Required; usually {@link KeyExtractors#header(String)}.
     * Whatever it throws (but a {@link VirtualMachineError}) is a {@link
     * DedupKeyMalformedException} with it as the cause: the record is not retried but dead-lettered
     * at once, its handler not run.
     */
    public Builder<K, V> key(KeyExtractor<K, V> keyExtractor) {
      this.keyExtractor = Objects.requireNonNull(keyExtractor, "keyExtractor");
      return this;
    }

    /** The work to apply once per key. Required. */
    public Builder<K, V> handler(RecordHandler<K, V> handler) {
      this.handler = Objects.requireNonNull(handler, "handler");
      return this;
    }

    /** What to do with a record without a key. Default {@link #DEFAULT_MISSING_KEY_POLICY}. */
    public Builder<K, V> missingKeyPolicy(MissingKeyPolicy missingKeyPolicy) {
      this.missingKeyPolicy = Objects.requireNonNull(missingKeyPolicy, "missingKeyPolicy");
      return this;
    }

    /**
     * A digest of the payload (at most 64 characters, such as a hex SHA-256): a later record with
     * the same key and another digest is refused as a conflict. Default: none. What it throws is a
     * {@link DedupKeyMalformedException}, as for the {@link #key(KeyExtractor) key extractor}.
     */
    public Builder<K, V> fingerprint(Function<ConsumerRecord<K, V>, String> fingerprint) {
      this.fingerprint = Objects.requireNonNull(fingerprint, "fingerprint");
      return this;
    }

    /** The consumer group, named in records and exceptions. Default: not named. */
    public Builder<K, V> groupId(String groupId) {
      this.groupId = Objects.requireNonNull(groupId, "groupId");
      return this;
    }

    /**
     * Under a {@link DedupPollLoop}: whether the keys of each poll are claimed together, in one
     * round trip (true, the default), or each record's key is claimed on its own when the record
     * comes (false). Either way SUCCESS marks are written in groups by the executor's writer thread
     * while the handler goes on, and the loop commits an offset only once the record's SUCCESS is
     * written. Both hold the same guarantees per record. In mode SEPARATE a process that dies after
     * a handler ran and before its SUCCESS was written re-runs it on redelivery: the record in hand
     * when claimed one by one (a record's handler runs only once the previous record's SUCCESS is
     * written), at most the records of the poll when claims are per poll.
     */
    public Builder<K, V> claimsPerPoll(boolean claimsPerPoll) {
      this.claimsPerPoll = claimsPerPoll;
      return this;
    }

    public IdempotentRecordHandler<K, V> build() {
      return new IdempotentRecordHandler<>(this);
    }
  }
}
