package io.consumerdedup.core;

import io.consumerdedup.core.internal.Durations;
import io.consumerdedup.core.internal.FaultPoints;
import io.consumerdedup.core.internal.LeaseRenewer;
import io.consumerdedup.core.internal.Outcomes;
import io.consumerdedup.core.internal.OwnerIds;
import io.consumerdedup.core.internal.RecentClaims;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.Callable;
import org.jspecify.annotations.Nullable;

/**
 * The engine: runs a handler at most once per {@link DedupKey} that succeeded, across threads,
 * processes and hosts.
 *
 * <p>{@link #execute(DedupKey, Callable)} claims the key in the {@link DedupStore} in its own short
 * transaction (status PROCESSING, under a lease), runs the handler, and records SUCCESS. When the
 * handler throws, it records FAILED and rethrows, so the next delivery retries; when what it throws
 * is an exception that waiting can help (a nested call's key held by another consumer, the database
 * unreachable), it gives the claim back uncounted instead ({@link DedupClaim#failOrRelease}). While
 * the handler runs, a background task renews the lease at {@link
 * Builder#renewalInterval(Duration)}, so a slow but live handler is never taken over; a crashed
 * holder's lease simply runs out, and then another consumer takes the key over.
 *
 * <p>Every call to the store is made to survive its failure modes: a claim whose reply was lost
 * after the server committed it is recognised as ours when it is sent again; an outcome (SUCCESS or
 * FAILED) that cannot be written is kept, its lease still renewed, and written in the background,
 * and this process does not run the handler for that key again before it is written.
 *
 * <pre>{@code
 * IdempotentExecutor executor = IdempotentExecutor.builder(store).lease(Duration.ofMinutes(5)).build();
 * DedupResult<Void> result = executor.execute(DedupKey.of("payment", orderNo), () -> {
 *   charge(orderNo);
 *   return null;
 * });
 * }</pre>
 *
 * <p>Instances are thread-safe; share one per store and close it on shutdown (it owns the renewal
 * thread). All lease and retention times are judged by the store's clock; the executor reads no
 * wall-clock time.
 */
public final class IdempotentExecutor implements AutoCloseable {

  /** Default lease: as long as Kafka's default {@code max.poll.interval.ms} (5 minutes). */
  public static final Duration DEFAULT_LEASE = Duration.ofMinutes(5);

  /** By default the lease is renewed this many times per lease period while the handler runs. */
  public static final int DEFAULT_RENEWALS_PER_LEASE = 3;

  /**
   * Default time a SUCCESS record is kept, during which redeliveries are recognised as duplicates.
   */
  public static final Duration DEFAULT_SUCCESS_RETENTION = Duration.ofDays(7);

  /** Default time a FAILED (or abandoned) record is kept, for inspection and for retries. */
  public static final Duration DEFAULT_FAILED_RETENTION = Duration.ofDays(30);

  /** Default reaction to another consumer's live lease. */
  public static final InProgressPolicy DEFAULT_IN_PROGRESS_POLICY = InProgressPolicy.THROW;

  /** Default longest wait under {@link InProgressPolicy#WAIT}. */
  public static final Duration DEFAULT_WAIT_TIMEOUT = Duration.ofSeconds(30);

  /** Default mode: the claim in its own transaction, for side effects anywhere. */
  public static final DedupMode DEFAULT_MODE = DedupMode.SEPARATE;

  /** Default reaction to a payload fingerprint that differs from the stored one. */
  public static final ConflictPolicy DEFAULT_CONFLICT_POLICY = ConflictPolicy.THROW;

  /**
   * The shortest lease: the stores keep leases in whole milliseconds, and a shorter one was written
   * as none at all, so another consumer took the key over while its holder still ran the handler.
   */
  public static final Duration SHORTEST_LEASE = Duration.ofMillis(1);

  /**
   * The longest lease or wait timeout (100 years): beyond about 292 years their nanoseconds no
   * longer fit a long, and the builder or every claim failed with {@code ArithmeticException}.
   */
  public static final Duration LONGEST_LEASE = Duration.ofDays(36_500);

  /**
   * The longest retention (1000 years): a SUCCESS kept "for ever" ({@code ChronoUnit.FOREVER}, or
   * 300,000 years) was written as a time the database cannot hold, so no SUCCESS was ever recorded:
   * each key stayed PROCESSING with its handler run, and ran again once its lease ran out. MySQL's
   * times end in the year 9999, PostgreSQL's intervals at about 292,000 years.
   */
  public static final Duration LONGEST_RETENTION = Duration.ofDays(365_000);

  private static final String LEASE_RANGE =
      "leases are kept in whole milliseconds, and timed in nanoseconds";
  private static final String RETENTION_RANGE =
      "the time it ends must fit the database's timestamps";

  private final DedupStore store;
  private final DedupMode mode;
  private final String ownerId;
  private final Duration lease;
  private final Duration renewalInterval;
  private final Duration successRetention;
  private final Duration failedRetention;
  private final InProgressPolicy inProgressPolicy;
  private final Duration waitTimeout;
  private final ConflictPolicy conflictPolicy;
  private final DedupListener listener;
  private final LeaseRenewer renewer;
  private final Outcomes outcomes;
  // The steps of a claim, each in its own class: sending it (and keeping the ids of claims whose
  // answer was lost), turning the store's answer into the delivery's, claim's waiting out another
  // consumer's lease, and claimAll's bookkeeping.
  private final SingleClaims single;
  private final BatchClaims batches;
  private volatile boolean closed;

  private IdempotentExecutor(Builder b, Duration renewalInterval) {
    this.store = b.store;
    this.mode = b.mode;
    this.ownerId = b.ownerId != null ? b.ownerId : OwnerIds.generate();
    this.lease = b.lease;
    this.renewalInterval = renewalInterval;
    this.successRetention = b.successRetention;
    this.failedRetention = b.failedRetention;
    this.inProgressPolicy = b.inProgressPolicy;
    this.waitTimeout = b.waitTimeout;
    this.conflictPolicy = b.conflictPolicy;
    this.listener = DedupListener.composite(List.of(b.listener));
    this.renewer = new LeaseRenewer(store, lease, renewalInterval, this.listener);
    this.outcomes =
        new Outcomes(store, listener, renewer, successRetention, failedRetention, renewalInterval);
    RecentClaims recentClaims = new RecentClaims();
    ClaimCalls calls =
        new ClaimCalls(
            store,
            this.listener,
            outcomes,
            ownerId,
            lease,
            mode,
            successRetention,
            failedRetention,
            recentClaims);
    ClaimAnswers answers =
        new ClaimAnswers(this.listener, conflictPolicy, outcomes, calls, recentClaims);
    this.single = new SingleClaims(calls, answers, renewer, mode, inProgressPolicy, waitTimeout);
    this.batches = new BatchClaims(this, calls, answers, renewer);
  }

  /** Starts building an executor over {@code store}. */
  public static Builder builder(DedupStore store) {
    return new Builder(store);
  }

  /**
   * Runs {@code handler} once for {@code key}: see {@link #execute(DedupKey, String, String,
   * Callable)}.
   */
  public <T> DedupResult<T> execute(DedupKey key, Callable<T> handler) {
    return execute(key, null, null, handler);
  }

  /**
   * Runs {@code handler} once for {@code key}, refusing a delivery whose payload fingerprint
   * differs from the one first stored under the key: see {@link #execute(DedupKey, String, String,
   * Callable)}.
   */
  public <T> DedupResult<T> execute(
      DedupKey key, @Nullable String fingerprint, Callable<T> handler) {
    return execute(key, fingerprint, null, handler);
  }

  /**
   * Claims {@code key}, runs {@code handler}, and records the result.
   *
   * @param fingerprint a digest of the payload (at most 64 characters), or null to not compare
   *     payloads
   * @param source where the delivery came from, such as {@code payments-0@42}: stored with the
   *     claim and named in exceptions; null if unknown
   * @return PROCESSED with the handler's value, or DUPLICATE if the key had already succeeded
   * @throws DedupInProgressException another consumer holds a live lease on the key (under {@link
   *     InProgressPolicy#WAIT}: still after the wait timeout); retry later
   * @throws DedupKeyConflictException the fingerprint differs from the stored one (under {@link
   *     ConflictPolicy#THROW}, or under {@link ConflictPolicy#TREAT_AS_DUPLICATE} when the stored
   *     action has not succeeded)
   * @throws DedupStoreException the claim failed (see {@link #claim}); the handler did not run
   * @throws DedupStoreUnavailableException the handler ran, but SUCCESS is not written yet: it is
   *     retried in the background while the lease is renewed, and until it is written this process
   *     answers the key's deliveries with this exception instead of running the handler again;
   *     retry the delivery later (it is then a duplicate)
   * @throws DedupLeaseLostException the handler ran, but another consumer took the key over before
   *     SUCCESS could be written (this holder's lease had run out); retry the delivery later
   * @throws DedupHandlerException the handler threw a checked exception (its cause); runtime
   *     exceptions and errors propagate unchanged. In both cases the record was marked FAILED, or,
   *     for an exception that waiting can help ({@link DedupClaim#failOrRelease}), the claim given
   *     back uncounted.
   * @throws IllegalStateException in mode TRANSACTIONAL, the handler returned but the database had
   *     rolled back the caller's transaction under it, the claim's record with it (InnoDB at a
   *     deadlock the handler caught): roll the transaction back, and the record is retried
   */
  public <T> DedupResult<T> execute(
      DedupKey key, @Nullable String fingerprint, @Nullable String source, Callable<T> handler) {
    Objects.requireNonNull(handler, "handler");
    DedupClaim claim = claim(key, fingerprint, source);
    if (claim.isDuplicate()) {
      return new DedupResult<>(Outcome.DUPLICATE, null, claim.attempt());
    }
    T value;
    try {
      value = handler.call();
    } catch (Throwable error) {
      try {
        claim.failOrRelease(error);
      } catch (Error e) {
        endAgain(claim, e, () -> claim.failOrRelease(error));
        throw e;
      }
      throw propagate(key, source, error);
    }
    FaultPoints.reached(FaultPoints.Point.AFTER_HANDLER);
    try {
      claim.complete();
    } catch (Error e) {
      endAgain(claim, e, claim::complete);
      throw e;
    }
    return new DedupResult<>(Outcome.PROCESSED, value, claim.attempt());
  }

  /**
   * An {@code Error} as the claim was ended, whose outcome could not be handed over even by the
   * claim's own second try: the claim is open again, for its caller to end, and the caller here is
   * this executor. Left open, the key stayed PROCESSING under a lease renewed for the executor's
   * life, each redelivery "in progress", though the handler had run. Ended once more, as the poll
   * loop's handler ends such a claim; what that throws rides with {@code e}.
   */
  private static void endAgain(DedupClaim claim, Error e, Runnable ending) {
    if (!claim.isOpen()) {
      return;
    }
    try {
      ending.run();
    } catch (RuntimeException | Error notWritten) {
      if (notWritten != e) {
        e.addSuppressed(notWritten);
      }
    }
    claim.endUnhandedOutcome(); // an Error that repeats: not open for the executor's life
  }

  /**
   * The first half of {@link #execute(DedupKey, String, String, Callable)}, for callers that cannot
   * hand over the handler as a {@link Callable}, such as a record interceptor that sees the record
   * before the listener and the outcome after it. Unless the answer {@link DedupClaim#isDuplicate()
   * is a duplicate}, the caller runs its handler and then must call exactly one of {@link
   * DedupClaim#complete()} or {@link DedupClaim#fail(Throwable)}; until then the lease is renewed
   * in the background.
   *
   * @throws DedupInProgressException another consumer holds a live lease on the key
   * @throws DedupKeyConflictException the fingerprint differs from the stored one
   * @throws DedupStoreUnavailableException the store could not be reached after its retries, or the
   *     outcome of an earlier attempt of this key in this process is still not written; the handler
   *     must not run
   * @throws DedupStoreException the store failed otherwise; the handler must not run
   * @throws DedupExecutorClosedException the executor is closed; retry the delivery later
   */
  public DedupClaim claim(DedupKey key, @Nullable String fingerprint, @Nullable String source) {
    Objects.requireNonNull(key, "key");
    if (closed) {
      // A claim now could not be renewed: it would block the key for a whole lease.
      throw closedException(key, source);
    }
    return single.claim(key, fingerprint, source);
  }

  private DedupExecutorClosedException closedException(
      @Nullable DedupKey key, @Nullable String source) {
    return new DedupExecutorClosedException(
        "IdempotentExecutor " + ownerId + " is closed", key, source, null);
  }

  /**
   * Claims the keys of several deliveries in one round trip to the store, as {@link #claim} claims
   * one, and renews the leases of those it holds together. Each delivery gets its own answer
   * ({@link DedupClaims#get(int)}): held, duplicate, or refused (in progress elsewhere, a
   * conflicting payload); a key in progress elsewhere is refused at once, whatever the {@link
   * InProgressPolicy}, since waiting would hold up the whole batch. A later copy of a key in the
   * same batch is claimed only when its answer is asked for, after the earlier copy has ended; so
   * is a key whose SUCCESS from an earlier delivery in this process is still being written. The
   * held claims are ended one by one, as {@link #claim}'s; {@link DedupClaims#releaseUnended()}
   * gives back those whose handler never ran.
   *
   * @throws DedupStoreException the store could not be reached after its retries, or failed
   *     otherwise: no key of the batch is claimed (the claims of one whose reply was lost are
   *     recognised as this process's own when sent again)
   * @throws DedupExecutorClosedException the executor is closed
   */
  public DedupClaims claimAll(List<Delivery> deliveries) {
    return claimAll(deliveries, true);
  }

  /**
   * As {@link #claimAll(List)}, for keys claimed ahead of their deliveries (the records of a poll),
   * each of which claims its key alone with {@link #claim} if this fails: a store failure here is
   * not told to the {@link DedupListener} (the {@code store_failed} outcome), since the claim of
   * each delivery then tells its own, and the first delivery was counted twice.
   *
   * @throws DedupStoreException as {@link #claimAll(List)}
   * @throws DedupExecutorClosedException the executor is closed
   */
  public DedupClaims claimAhead(List<Delivery> deliveries) {
    return claimAll(deliveries, false);
  }

  private DedupClaims claimAll(List<Delivery> deliveries, boolean tellStoreFailure) {
    Objects.requireNonNull(deliveries, "deliveries");
    if (closed) {
      throw closedException(null, null);
    }
    return batches.claimAll(deliveries, tellStoreFailure);
  }

  /**
   * One delivery of a batch for {@link #claimAll(List)}.
   *
   * @param fingerprint a digest of the payload (at most 64 characters), or null to not compare
   * @param source where the delivery came from, such as {@code payments-0@42}, or null
   */
  public record Delivery(DedupKey key, @Nullable String fingerprint, @Nullable String source) {
    public Delivery {
      Objects.requireNonNull(key, "key");
    }
  }

  private static RuntimeException propagate(
      DedupKey key, @Nullable String source, Throwable error) {
    if (error instanceof RuntimeException runtime) {
      return runtime;
    }
    if (error instanceof Error fatal) {
      throw fatal;
    }
    if (error instanceof InterruptedException) {
      Thread.currentThread().interrupt();
    }
    return new DedupHandlerException(key, source, (Exception) error);
  }

  /** The store this executor claims keys in. */
  public DedupStore store() {
    return store;
  }

  /** Whether claims are separate transactions or join the caller's. */
  public DedupMode mode() {
    return mode;
  }

  /** This instance's owner id, written to every record it claims. */
  public String ownerId() {
    return ownerId;
  }

  public Duration lease() {
    return lease;
  }

  public Duration renewalInterval() {
    return renewalInterval;
  }

  public Duration successRetention() {
    return successRetention;
  }

  public Duration failedRetention() {
    return failedRetention;
  }

  public InProgressPolicy inProgressPolicy() {
    return inProgressPolicy;
  }

  public Duration waitTimeout() {
    return waitTimeout;
  }

  public ConflictPolicy conflictPolicy() {
    return conflictPolicy;
  }

  /** The listener that receives this executor's events. */
  public DedupListener listener() {
    return listener;
  }

  /**
   * Hands the SUCCESS mark that the calling thread left for its next claim ({@link
   * DedupClaim#completeWithNextClaim()}) to the writer thread now: call it when no claim follows,
   * such as after the last record of a poll, before waiting for the marks. Without it the mark
   * waits a few milliseconds for a claim first.
   */
  public void flushMarks() {
    outcomes.flushParked();
  }

  /**
   * The outcomes of this executor's claims that are not written yet (the store was unreachable), by
   * key: SUCCESS or FAILED. They are retried in the background while their leases are renewed.
   */
  public java.util.Map<DedupKey, String> unrecordedOutcomes() {
    return outcomes.unrecorded();
  }

  /**
   * Whether {@link #close()} was called: the outcomes not written by then were given up, and no
   * longer show in {@link #unrecordedOutcomes()}.
   */
  public boolean isClosed() {
    return closed;
  }

  /**
   * Stops the lease renewal. SUCCESS marks still queued for the writer thread are written once
   * first; handlers still running lose their renewal; outcomes not yet written are logged at ERROR
   * and given up, and a caller waiting for one is told with {@link DedupExecutorClosedException}.
   * From now on a claim throws {@link DedupExecutorClosedException} (retry later): close the poll
   * loops and containers that use this executor first.
   */
  @Override
  public void close() {
    closed = true;
    try {
      outcomes.close();
    } finally {
      // Whatever the giving up of outcomes throws (an appender out of memory on its ERROR): the
      // renewals skipped went on for the process's life, the closed executor's keys "in progress"
      // for every other consumer.
      renewer.close();
    }
  }

  /** Builds an {@link IdempotentExecutor}; every setter validates its value at once. */
  public static final class Builder {
    private final DedupStore store;
    private DedupMode mode = DEFAULT_MODE;
    private @Nullable String ownerId;
    private Duration lease = DEFAULT_LEASE;
    private @Nullable Duration renewalInterval;
    private Duration successRetention = DEFAULT_SUCCESS_RETENTION;
    private Duration failedRetention = DEFAULT_FAILED_RETENTION;
    private InProgressPolicy inProgressPolicy = DEFAULT_IN_PROGRESS_POLICY;
    private Duration waitTimeout = DEFAULT_WAIT_TIMEOUT;
    private ConflictPolicy conflictPolicy = DEFAULT_CONFLICT_POLICY;
    private DedupListener listener = DedupListener.NOOP;

    private Builder(DedupStore store) {
      this.store = Objects.requireNonNull(store, "store");
    }

    /**
     * How long a claim holds the key without renewal before another consumer may take it over.
     * Default {@link #DEFAULT_LEASE}; from {@link #SHORTEST_LEASE} to {@link #LONGEST_LEASE}.
     * Choose it longer than a pause you would not call a crash.
     */
    public Builder lease(Duration lease) {
      this.lease =
          Durations.requireBetween("lease", lease, SHORTEST_LEASE, LONGEST_LEASE, LEASE_RANGE);
      return this;
    }

    /**
     * How often the lease is renewed while the handler runs. Must be shorter than the lease;
     * default lease / {@value #DEFAULT_RENEWALS_PER_LEASE}.
     */
    public Builder renewalInterval(Duration renewalInterval) {
      this.renewalInterval = Durations.requirePositive("renewalInterval", renewalInterval);
      return this;
    }

    /**
     * How long a SUCCESS record is kept. Default {@link #DEFAULT_SUCCESS_RETENTION}; at most {@link
     * #LONGEST_RETENTION}.
     */
    public Builder successRetention(Duration successRetention) {
      this.successRetention =
          Durations.requireBetween(
              "successRetention",
              successRetention,
              Duration.ofNanos(1),
              LONGEST_RETENTION,
              RETENTION_RANGE);
      return this;
    }

    /**
     * How long a FAILED or abandoned record is kept. Default {@link #DEFAULT_FAILED_RETENTION}; at
     * most {@link #LONGEST_RETENTION}.
     */
    public Builder failedRetention(Duration failedRetention) {
      this.failedRetention =
          Durations.requireBetween(
              "failedRetention",
              failedRetention,
              Duration.ofNanos(1),
              LONGEST_RETENTION,
              RETENTION_RANGE);
      return this;
    }

    /**
     * {@link DedupMode#SEPARATE} (default) or {@link DedupMode#TRANSACTIONAL}, for handlers whose
     * effects are writes to the dedup table's database inside a transaction the caller opened.
     */
    public Builder mode(DedupMode mode) {
      this.mode = Objects.requireNonNull(mode, "mode");
      return this;
    }

    /** Reaction to another consumer's live lease. Default {@link InProgressPolicy#THROW}. */
    public Builder inProgressPolicy(InProgressPolicy inProgressPolicy) {
      this.inProgressPolicy = Objects.requireNonNull(inProgressPolicy, "inProgressPolicy");
      return this;
    }

    /**
     * Longest wait under {@link InProgressPolicy#WAIT}. Default {@link #DEFAULT_WAIT_TIMEOUT}; at
     * most {@link #LONGEST_LEASE}.
     */
    public Builder waitTimeout(Duration waitTimeout) {
      this.waitTimeout =
          Durations.requireBetween(
              "waitTimeout",
              waitTimeout,
              Duration.ofNanos(1),
              LONGEST_LEASE,
              "timed in nanoseconds");
      return this;
    }

    /** Reaction to a differing payload fingerprint. Default {@link ConflictPolicy#THROW}. */
    public Builder conflictPolicy(ConflictPolicy conflictPolicy) {
      this.conflictPolicy = Objects.requireNonNull(conflictPolicy, "conflictPolicy");
      return this;
    }

    /**
     * The id written as owner of every claim: 1 to 128 characters, no control characters. Default:
     * host name, process id and a short random part, unique per executor.
     */
    public Builder ownerId(String ownerId) {
      // PostgreSQL refuses a NUL in text: taken at the first claim, it failed every claim as the
      // store refusing its data, which dead-letters each record unapplied.
      this.ownerId = OwnerIds.check(Objects.requireNonNull(ownerId, "ownerId"));
      return this;
    }

    /** Receives the engine's events (metrics, logs). Default: none. */
    public Builder listener(DedupListener listener) {
      this.listener = Objects.requireNonNull(listener, "listener");
      return this;
    }

    /**
     * Builds the executor.
     *
     * @throws IllegalArgumentException if the renewal interval is not shorter than the lease
     */
    public IdempotentExecutor build() {
      Duration renewal =
          renewalInterval != null ? renewalInterval : lease.dividedBy(DEFAULT_RENEWALS_PER_LEASE);
      if (renewal.compareTo(lease) >= 0) {
        throw new IllegalArgumentException(
            "renewalInterval ("
                + renewal
                + ") must be shorter than the lease ("
                + lease
                + "), or the lease runs out between renewals");
      }
      if (renewal.isZero()) {
        throw new IllegalArgumentException("lease (" + lease + ") is too short to renew");
      }
      store.verifyReady(mode);
      return new IdempotentExecutor(this, renewal);
    }
  }
}
