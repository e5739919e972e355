package io.consumerdedup.spring;

import io.consumerdedup.core.DedupAttemptsExhaustedException;
import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupException;
import io.consumerdedup.core.DedupInProgressException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupKeyConflictException;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.DedupStoreUnavailableException;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.internal.FailureTexts;
import io.consumerdedup.kafka.MissingKeyPolicy;
import io.consumerdedup.kafka.internal.RecordKeyResolver;
import io.consumerdedup.spring.internal.AttemptLimit;
import io.consumerdedup.spring.internal.ConsumerPoll;
import io.consumerdedup.spring.internal.CurrentBatch;
import io.consumerdedup.spring.internal.CurrentRecordInterceptor;
import io.consumerdedup.spring.internal.HeldAcknowledgment;
import io.consumerdedup.spring.internal.ListenerOutcomes;
import io.consumerdedup.spring.internal.OwnTransactionWatch;
import io.consumerdedup.spring.internal.PollAwareConsumer;
import java.lang.reflect.Method;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.aopalliance.intercept.MethodInterceptor;
import org.aopalliance.intercept.MethodInvocation;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.aop.support.AopUtils;
import org.springframework.beans.factory.BeanFactory;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.kafka.support.KafkaUtils;
import org.springframework.messaging.Message;
import org.springframework.messaging.support.MessageHeaderAccessor;
import org.springframework.transaction.CannotCreateTransactionException;
import org.springframework.transaction.support.TransactionSynchronization;
import org.springframework.transaction.support.TransactionSynchronizationManager;

/**
 * Runs {@link Idempotent} listener methods through the core engine: derives the business key from
 * the record being delivered (its header, or the SpEL expression), claims it with the listener's
 * {@link IdempotentExecutor}, invokes the method unless the key already succeeded, and records the
 * outcome. Every decision (claim, duplicate, in progress, conflict, missing key) is the engine's;
 * this class only adapts the method call.
 *
 * <p>It stands at two places of a listener bean's proxy ({@link IdempotentListenerPostProcessor}):
 * {@link #outsideTransactions()} for mode SEPARATE, before any {@code @Transactional} advice, so
 * the claim commits and its connection goes back to the pool before the listener's transaction
 * takes one, and the outcome is written after that transaction committed (FAILED if it threw);
 * {@link #insideTransactions()} for mode TRANSACTIONAL, within the listener's transaction, which
 * the dedup row joins.
 *
 * <p>When the outcome is written: without a transaction, before the method returns to the
 * container, so a SUCCESS that cannot be written keeps the container from acknowledging the record
 * (an {@code Acknowledgment} the listener calls, its argument or the header of its message, is
 * passed on only then); inside the container's Spring transaction, after it commits; inside a Kafka
 * transaction of the container, once the container is done with the record ({@link
 * CurrentRecordInterceptor}); for a method returning a {@code CompletableFuture} or {@code Mono},
 * when it completes (then as above, in a transaction of the container), which the call waits for:
 * the container gets a completed future, or the listener's failure thrown, so that its error
 * handler sees the failure before anything is acknowledged. A listener that calls {@code
 * Acknowledgment.nack} leaves its key FAILED, so the redelivery it asked for runs it again. A
 * duplicate is not invoked: it returns {@code null}, a primitive's zero, or an empty future or
 * Mono, and its {@code Acknowledgment} is acknowledged if the container called the method (a
 * {@code @KafkaListener}, {@code @KafkaHandler} or {@code @DltHandler} method); a method that a
 * listener calls leaves its record to that listener to acknowledge.
 *
 * <p>Claims per poll (unless built with {@code claimsPerPoll} false): when the container's consumer
 * tells the listener its poll ({@link DedupConsumerPostProcessor}, which {@link
 * DedupContainers#configure} adds), the listener's first record of a poll claims the keys of the
 * rest of the poll in one statement ({@link PollClaims}), and SUCCESS is written in the background,
 * grouped with other records' marks, instead of before the method returns: the consumer holds back
 * every offset commit until the marks of the records it passes are durable, so what is said above
 * of a SUCCESS that cannot be written holds for the commit instead of the call. A listener call
 * that fails gives back the poll's claims it did not use. Mode TRANSACTIONAL, a container's Kafka
 * transactions and {@code @KafkaHandler} methods claim record by record.
 *
 * <p>The record comes from the method's {@code ConsumerRecord} argument if it has one, else from
 * {@link CurrentRecordInterceptor}. The method's own exceptions are rethrown as themselves after
 * FAILED is recorded, each failed attempt logged in one WARN line, except on the last attempt
 * allowed: a listener that failed {@code maxAttempts} times for a key, as the dedup table counts
 * them (across restarts, rebalances and instances), is given up with a {@link
 * DedupAttemptsExhaustedException} whose cause is its last exception, and a key already failed that
 * often is given up without running the listener again; the error handler does not retry that
 * exception, so its recoverer (a dead-letter topic) gets the record at once.
 */
public final class IdempotentListenerInterceptor {

  /**
   * Default of {@code maxAttempts}: 10, as many deliveries as spring-kafka's default {@code
   * DefaultErrorHandler} makes, so that within one run the error handler's own back-off decides as
   * before, and the limit only keeps a restart from granting a failing record ten more.
   */
  public static final int DEFAULT_MAX_ATTEMPTS = 10;

  /**
   * The shortest lease, of {@code consumer-dedup.lease} and {@code @Idempotent(lease)} alike: a
   * shorter one is taken over while a listener runs.
   */
  public static final Duration SHORTEST_LEASE = Duration.ofSeconds(1);

  /**
   * Default of {@link #asyncListenerTimeout}: 5 minutes, Kafka's default {@code
   * max.poll.interval.ms}, past which the consumer waiting has left its group anyway.
   */
  public static final Duration DEFAULT_ASYNC_LISTENER_TIMEOUT = Duration.ofMinutes(5);

  private static final Logger log = LoggerFactory.getLogger(IdempotentListenerInterceptor.class);

  /** How often the wait for a listener's future looks whether its container is stopping. */
  private static final Duration STOP_CHECK = Duration.ofMillis(100);

  private final IdempotentExecutors executors;
  private final MissingKeyPolicy defaultMissingKeyPolicy;
  private final AttemptLimit attempts;
  private final boolean claimsPerPoll;
  private final @Nullable BeanFactory beanFactory;
  private final Map<Method, Optional<IdempotentListenerMethod>> methods = new ConcurrentHashMap<>();
  private final Set<String> listenersThatCannotAcknowledge = ConcurrentHashMap.newKeySet();
  private volatile @Nullable ObservationOutcomeTagger outcomeTagger;
  private volatile Duration asyncListenerTimeout = DEFAULT_ASYNC_LISTENER_TIMEOUT;
  private final MethodInterceptor outsideTransactions = forMode(DedupMode.SEPARATE);
  private final MethodInterceptor insideTransactions = forMode(DedupMode.TRANSACTIONAL);

  /**
   * An interceptor allowing {@link #DEFAULT_MAX_ATTEMPTS} attempts per key.
   *
   * @param beanFactory resolves {@code @bean} references in key expressions; may be null
   */
  public IdempotentListenerInterceptor(
      IdempotentExecutors executors,
      MissingKeyPolicy defaultMissingKeyPolicy,
      @Nullable BeanFactory beanFactory) {
    this(executors, defaultMissingKeyPolicy, DEFAULT_MAX_ATTEMPTS, beanFactory);
  }

  /**
   * @param maxAttempts how many times a failing listener runs for one key, counted in the dedup
   *     table, before its record is given up (mode SEPARATE; in mode TRANSACTIONAL a failed attempt
   *     leaves no row to count)
   * @param beanFactory resolves {@code @bean} references in key expressions; may be null
   * @throws IllegalArgumentException if {@code maxAttempts} is less than 1
   */
  public IdempotentListenerInterceptor(
      IdempotentExecutors executors,
      MissingKeyPolicy defaultMissingKeyPolicy,
      int maxAttempts,
      @Nullable BeanFactory beanFactory) {
    this(executors, defaultMissingKeyPolicy, maxAttempts, true, beanFactory);
  }

  /**
   * @param maxAttempts as above
   * @param claimsPerPoll whether a record listener claims the keys of a whole poll in one statement
   *     and has its SUCCESS marks written in the background, grouped, before the consumer commits
   *     past them (true), or claims each record's key and writes its SUCCESS before returning
   *     (false; {@code consumer-dedup.claims-per-poll=false})
   * @param beanFactory resolves {@code @bean} references in key expressions; may be null
   * @throws IllegalArgumentException if {@code maxAttempts} is less than 1
   */
  public IdempotentListenerInterceptor(
      IdempotentExecutors executors,
      MissingKeyPolicy defaultMissingKeyPolicy,
      int maxAttempts,
      boolean claimsPerPoll,
      @Nullable BeanFactory beanFactory) {
    this.executors = Objects.requireNonNull(executors, "executors");
    this.defaultMissingKeyPolicy =
        Objects.requireNonNull(defaultMissingKeyPolicy, "defaultMissingKeyPolicy");
    this.attempts = new AttemptLimit(maxAttempts);
    this.claimsPerPoll = claimsPerPoll;
    this.beanFactory = beanFactory;
  }

  /**
   * Tags each record's listener observation with its outcome also when the record's key was claimed
   * with the rest of its poll (the engine tells those outcomes while the poll's first record is
   * delivered). The auto-configuration sets the tagger it defines.
   */
  public void tagOutcomesWith(@Nullable ObservationOutcomeTagger tagger) {
    this.outcomeTagger = tagger;
  }

  /**
   * How long the consumer thread waits for the future or {@code Mono} of an asynchronous listener
   * ({@code consumer-dedup.async-listener-timeout}). One that does not complete by then (a future
   * the application never completes, a {@code Mono} whose work threw a JVM-fatal {@code Error} on a
   * scheduler thread, which Reactor only logs) would otherwise hold the consumer thread, and the
   * key under a lease renewed for as long as the process lives, for good.
   *
   * @throws IllegalArgumentException if {@code timeout} is not positive
   */
  public void asyncListenerTimeout(Duration timeout) {
    if (timeout.isNegative() || timeout.isZero()) {
      throw new IllegalArgumentException("asyncListenerTimeout must be positive: " + timeout);
    }
    this.asyncListenerTimeout = timeout;
  }

  /** The advice for listeners in mode SEPARATE: to stand before any transaction advice. */
  public MethodInterceptor outsideTransactions() {
    return outsideTransactions;
  }

  /** The advice for listeners in mode TRANSACTIONAL: to stand within the transaction advice. */
  public MethodInterceptor insideTransactions() {
    return insideTransactions;
  }

  private MethodInterceptor forMode(DedupMode mode) {
    return invocation -> {
      IdempotentListenerMethod listener = listenerOf(invocation).orElse(null);
      if (listener == null) {
        return invocation.proceed();
      }
      if (executors.modeOf(listener.overrides) != mode) {
        if (mode == DedupMode.TRANSACTIONAL) {
          // Within the transaction advice of a listener in mode SEPARATE, whose outcome is
          // written outside it: how its transaction ended decides the outcome.
          OwnTransactionWatch watch = OwnTransactionWatch.watchCurrentTransaction();
          Object result = invocation.proceed();
          if (watch != null) {
            watch.methodReturned();
          }
          return result;
        }
        return invokeOutsideTransaction(invocation, listener);
      }
      if (mode == DedupMode.TRANSACTIONAL) {
        OwnTransactionWatch.reached();
      }
      return invoke(invocation, listener);
    };
  }

  /**
   * Calls a listener in mode TRANSACTIONAL from outside its transaction advice: a transaction that
   * cannot be opened (the database down, no pool connection in time) is the claim's failure to
   * reach the dedup table, which is made in it. Passed on as it came, it was the listener's
   * failure: the error handler's tries (ten without back-off, by default) were spent within seconds
   * and the record skipped, never applied.
   */
  private @Nullable Object invokeOutsideTransaction(
      MethodInvocation invocation, IdempotentListenerMethod listener) throws Throwable {
    OwnTransactionWatch watch = OwnTransactionWatch.callStarts();
    try {
      return invocation.proceed();
    } catch (CannotCreateTransactionException e) {
      if (watch.reachedWithinTransaction()) {
        throw e;
      }
      throw transactionNotOpened(listener, ", in which its claim is made (mode TRANSACTIONAL),", e);
    } finally {
      watch.callEnded();
    }
  }

  /** The listener's transaction could not be opened: an outage, for the record to wait out. */
  static DedupStoreUnavailableException transactionNotOpened(
      IdempotentListenerMethod listener, String which, CannotCreateTransactionException e) {
    return new DedupStoreUnavailableException(
        "The transaction of listener "
            + listener
            + which
            + " could not be opened: "
            + FailureTexts.describe(e)
            + "; the record waits until it can",
        null,
        null,
        e);
  }

  private @Nullable Object invoke(MethodInvocation invocation, IdempotentListenerMethod listener)
      throws Throwable {
    IdempotentExecutor executor = executors.executor(listener.overrides);
    MissingKeyPolicy missingKeyPolicy =
        listener.missingKeyPolicy != null ? listener.missingKeyPolicy : defaultMissingKeyPolicy;
    if (listener.shape.batch != null) {
      warnIfItCannotAcknowledge(listener, invocation.getArguments());
      if (executor.mode() == DedupMode.TRANSACTIONAL) {
        throw new DedupConfigurationException(
            "@Idempotent batch listener "
                + listener
                + " is in mode TRANSACTIONAL (the application's default), which batch listeners"
                + " do not support: set mode SEPARATE on its @Idempotent, or make it a record"
                + " listener; the batch waits until then",
            null,
            null);
      }
      return new IdempotentBatchInvocation(
              listener, executor, missingKeyPolicy, attempts, beanFactory)
          .invoke(invocation);
    }
    @Nullable Object[] arguments = invocation.getArguments();
    ConsumerRecord<Object, Object> record = listener.record(arguments);
    warnIfItCannotAcknowledge(listener, arguments);
    ConsumerPoll poll = claimsPerPoll(listener, executor, record);
    if (poll == null) {
      return invokeRecord(
          invocation, listener, executor, missingKeyPolicy, arguments, record, null);
    }
    Object result;
    try {
      result =
          invokeRecord(invocation, listener, executor, missingKeyPolicy, arguments, record, poll);
    } catch (Throwable error) {
      // The container does not go on with this poll (its error handler seeks the records after
      // this one back, or an Error stops it): the claims the listener did not use are given back
      // now, and this record is claimed alone when it comes again. A share listener's batch goes
      // on with its next record, and gives back what is left when it ends.
      poll.listenerFailed(record, error);
      throw error;
    }
    poll.done(record);
    return result;
  }

  /**
   * Names once a listener that takes no {@code Acknowledgment} (nor the {@code Consumer}, to commit
   * through) in a container that commits only what is acknowledged: spring-kafka commits none of
   * its records and says nothing, so a newcomer who set {@code ack-mode: manual} over the quick
   * start's listener saw the lag grow, and every record come again after each restart, without a
   * word of why. A batch listener likewise, at its first batch: its container's ack mode is known
   * from {@link CurrentBatch}, and the messages of a {@code List<Message<?>>} carry the
   * acknowledgment. Not a method that a listener calls: that listener acknowledges its record.
   */
  private void warnIfItCannotAcknowledge(
      IdempotentListenerMethod listener, @Nullable Object[] arguments) {
    ContainerProperties.@Nullable AckMode ackMode =
        listener.shape.batchListener ? CurrentBatch.ackMode() : CurrentRecordInterceptor.ackMode();
    if (!listener.acknowledgesItsRecord
        || listener.shape.ackIndex >= 0
        || (ackMode != ContainerProperties.AckMode.MANUAL
            && ackMode != ContainerProperties.AckMode.MANUAL_IMMEDIATE)
        || Arrays.stream(arguments).anyMatch(IdempotentListenerInterceptor::canAcknowledge)
        || !listenersThatCannotAcknowledge.add(listener.signature)) {
      return;
    }
    log.warn(
        "Listener {} takes no Acknowledgment, but its container is in ack mode {}: spring-kafka"
            + " commits no offset of its records, so its consumer group's lag only grows, and each"
            + " record since the last commit is delivered again after a restart or a rebalance"
            + " (skipped then as a duplicate). Take an Acknowledgment argument and call"
            + " acknowledge(), or give the container ack mode BATCH (leave"
            + " spring.kafka.listener.ack-mode unset, or set it on the factory's container"
            + " properties)",
        listener,
        ackMode);
  }

  /**
   * Whether a listener given {@code argument} can acknowledge through it: the consumer, or a
   * message, its headers or a header accessor ({@code KafkaMessageHeaderAccessor}), which carry the
   * {@code Acknowledgment} (KafkaHeaders.ACKNOWLEDGMENT).
   */
  private static boolean canAcknowledge(@Nullable Object argument) {
    return argument instanceof Consumer<?, ?>
        || argument instanceof Message<?>
        || argument instanceof Map<?, ?>
        || argument instanceof MessageHeaderAccessor
        // A batch listener's messages each carry the batch's Acknowledgment.
        || (argument instanceof List<?> batch
            && !batch.isEmpty()
            && batch.get(0) instanceof Message<?>);
  }

  /**
   * The poll of the consumer delivering {@code record}, if its key is to be claimed with the poll's
   * other keys and its SUCCESS written in the background; null to claim it alone and write its
   * SUCCESS before returning, as in mode TRANSACTIONAL (the claim joins the listener's
   * transaction), in a Kafka transaction of the container (its offsets go with the producer's
   * transaction, which the marks cannot hold back), for a {@code @KafkaHandler} (the container may
   * hand the poll's other records to another method), and without a consumer that tells the
   * listener its poll ({@link io.consumerdedup.spring.internal.PollAwareConsumer}).
   */
  private @Nullable ConsumerPoll claimsPerPoll(
      IdempotentListenerMethod listener,
      IdempotentExecutor executor,
      ConsumerRecord<Object, Object> record) {
    if (!claimsPerPoll
        || listener.classLevel
        || executor.mode() != DedupMode.SEPARATE
        || ListenerOutcomes.inKafkaTransaction()) {
      return null;
    }
    return CurrentRecordInterceptor.pollOf(record);
  }

  private @Nullable Object invokeRecord(
      MethodInvocation invocation,
      IdempotentListenerMethod listener,
      IdempotentExecutor executor,
      MissingKeyPolicy missingKeyPolicy,
      @Nullable Object[] arguments,
      ConsumerRecord<Object, Object> record,
      @Nullable ConsumerPoll poll)
      throws Throwable {
    String groupId = KafkaUtils.getConsumerGroupId();
    KeyEvaluation evaluation = KeyEvaluation.ofCall(listener, record, arguments, beanFactory);
    RecordKeyResolver<Object, Object> keys =
        evaluation.resolver(missingKeyPolicy, groupId, executor);
    Optional<DedupKey> key = keys.resolve(record);
    if (key.isEmpty()) {
      // No mark of its own; those other methods' keys left for the record are still waited for.
      return invocation.proceed(); // no key, and the policy says to process it without dedup
    }
    String source = keys.source(record);
    if (executor.mode() == DedupMode.TRANSACTIONAL) {
      executors.requireTransaction(listener.toString(), key.get(), source);
    }
    String fingerprint = evaluation.fingerprint();
    DedupClaim claim = null;
    if (poll != null && !poll.failedLately(record)) {
      List<ConsumerRecord<?, ?>> rest = poll.recordsFrom(record);
      if (!rest.isEmpty()) {
        PollClaims claims =
            poll.claims(
                listener,
                l ->
                    PollClaims.claim(
                        listener, executor, missingKeyPolicy, groupId, beanFactory, rest, poll));
        // The engine told the outcomes of the poll's keys while its first record was delivered,
        // into that record's observation: each record's own is tagged here.
        try {
          claim = claims.claimFor(record, key.get(), fingerprint);
        } catch (DedupInProgressException e) {
          tag("in_progress");
          throw e;
        } catch (DedupKeyConflictException e) {
          tag("conflict");
          throw e;
        }
        if (claim != null) {
          tag(claim.isDuplicate() ? "duplicate" : "processed");
        }
      }
    }
    ListenerOutcomes.Pending earlier =
        claim == null && ListenerOutcomes.inKafkaTransaction()
            ? ListenerOutcomes.batchCall(record, key.get(), executor, fingerprint)
            : null;
    if (earlier != null) {
      if (earlier.appliedSoFar()) {
        // The key's earlier copy in this batch was applied, in the transaction this call is in.
        tag("duplicate");
        return listener.shape.duplicateResult();
      }
      // It failed, and the listener went on: this copy is tried under the same claim, whose
      // outcome is this call's.
      claim = earlier.claim();
    }
    if (claim == null) {
      claim = executor.claim(key.get(), fingerprint, source);
    }
    ListenerOutcomes.Pending pending;
    HeldAcknowledgment held = null;
    PollAwareConsumer.CommitHold commits;
    try {
      if (poll != null) {
        // Before the poll's first listener runs, the marks of the polls before are written (they
        // were on their way with this poll's claim): a kill re-runs records of this poll only.
        poll.awaitEarlierMarks();
      }
      DedupAttemptsExhaustedException exhausted = attempts.beyondLimit(claim, executor);
      if (exhausted != null) {
        throw exhausted;
      }
      Acknowledgment acknowledgment = listener.shape.acknowledgment(arguments);
      if (claim.isDuplicate()) {
        if (poll != null) {
          // SUCCESS, whatever an earlier delivery's mark of this key met; the marks of the
          // record's other keys (other @Idempotent methods it reached) are still waited for.
          poll.marks().written(record, key.get());
        }
        if (acknowledgment != null
            && listener.acknowledgesItsRecord
            && listener.shape.returns == ListenerShape.Returns.VALUE) {
          // As spring-kafka does for records it filters out: otherwise, in a manual ack mode, the
          // duplicate's offset is never committed and the consumer's lag never reaches zero. Not
          // for a method a listener calls, whose record the listener acknowledges: acknowledged
          // here, a redelivery for the listener's next method, which had failed, was committed
          // past before that method ran, and lost if it failed again before a stop or rebalance.
          acknowledgment.acknowledge();
        }
        return listener.shape.duplicateResult();
      }
      pending =
          earlier != null
              ? earlier.again()
              : ListenerOutcomes.pending(record, claim, attempts).claimedBy(executor, fingerprint);
      if (poll != null) {
        pending.markInBackground(poll.marks(), source, executor);
      }
      if (acknowledgment != null) {
        held =
            new HeldAcknowledgment(
                acknowledgment,
                pending::rolledBack,
                ListenerOutcomes.inKafkaTransaction() ? pending : null);
      }
      // A commit the listener makes through its Consumer argument or its message's consumer header
      // (which commits the positions, past its record) is held until its outcome is settled, and
      // dropped if it fails: sent at once, it passed a record then recorded FAILED, which a stop or
      // a crash before the error handler's retry lost.
      PollAwareConsumer<?, ?> committer = listener.shape.handOver(arguments, acknowledgment, held);
      // Within the give-back: an OutOfMemoryError here left a claim made alone PROCESSING.
      commits = committer == null ? null : committer.holdCommits();
    } catch (Throwable beforeCall) {
      if (earlier == null) {
        // An earlier call's claim stays with the batch, which settles it FAILED.
        giveBack(claim, executor, beforeCall);
      }
      throw beforeCall;
    }
    try {
      return invokeHoldingCommits(
          invocation, listener, record, claim, source, pending, held, commits);
    } finally {
      if (commits != null) {
        commits.release(false); // the call failed: its commits are dropped
      }
    }
  }

  private @Nullable Object invokeHoldingCommits(
      MethodInvocation invocation,
      IdempotentListenerMethod listener,
      ConsumerRecord<Object, Object> record,
      DedupClaim claim,
      String source,
      ListenerOutcomes.Pending pending,
      @Nullable HeldAcknowledgment held,
      PollAwareConsumer.@Nullable CommitHold commits)
      throws Throwable {
    Object result;
    // A null future or Mono (an early "return null" for work done at once) is a call that is
    // done: waiting for it would leave the claim open for good.
    ListenerShape.Returns returns = listener.shape.returns;
    CompletableFuture<?> future = null;
    OwnTransactionWatch ownTransaction = OwnTransactionWatch.callStarts();
    try {
      result = invocation.proceed();
      Throwable undone = ownTransaction.rollback();
      if (undone != null) {
        pending.rolledBack(undone);
      }
      if (result != null && returns == ListenerShape.Returns.FUTURE) {
        future = awaitable((CompletionStage<?>) result);
      } else if (result != null && returns == ListenerShape.Returns.MONO) {
        // Subscribing runs the Mono's work, and Reactor throws a JVM-fatal Error of that work (a
        // StackOverflowError, a NoClassDefFoundError) out of the subscription instead of
        // signalling it: it is the listener's failure as much as one the method threw.
        future = MonoOutcomes.toFuture(result);
      }
    } catch (Throwable error) {
      if (error instanceof CannotCreateTransactionException notOpened
          && !ownTransaction.reachedWithinTransaction()
          && !claim.isEnded()) {
        // Mode SEPARATE, the listener's own transaction advice could not open its transaction
        // (its database down, no pool connection in time), after the key was claimed: the method
        // was never called. Counted as its failure, the outage spent an attempt: with the
        // attempts used up, the next delivery dead-lettered a record that was never tried. The
        // claim is given back uncounted and the record waits, as in an outage of the dedup table.
        try {
          claim.release();
        } catch (RuntimeException releaseFailed) {
          notOpened.addSuppressed(releaseFailed);
        }
        throw transactionNotOpened(listener, "", notOpened);
      }
      if (ownTransaction.committedAfterReturning()) {
        // Thrown past the commit of the listener's own transaction (an afterCommit hook of the
        // application's): its effects are committed, so it is SUCCESS, and the retry the failure
        // brings is a duplicate. Recorded FAILED, the retry applied them a second time.
        pending.listenerSucceeded();
        settle(listener, record, pending, claim, source);
        throw error;
      }
      Throwable failure = WrappedConsumerCastException.naming(error, listener, claim.key(), source);
      pending.listenerFailed(failure);
      settle(listener, record, pending, claim, source);
      throw attempts.toThrow(claim, failure);
    } finally {
      ownTransaction.callEnded();
    }
    switch (future == null ? ListenerShape.Returns.VALUE : returns) {
      case FUTURE, MONO:
        // In a transaction of the container (Kafka's, say) the outcome waits for its end, as a
        // method returning a value's does: a SUCCESS written as the future completes would make
        // the redelivery of a transaction that then aborts, its output discarded, a duplicate.
        DedupClaim running = claim;
        Runnable settleHere =
            ListenerOutcomes.inKafkaTransaction()
                    || TransactionSynchronizationManager.isSynchronizationActive()
                ? () -> settle(listener, record, pending, running, source)
                : null;
        Object value =
            awaitSettled(Objects.requireNonNull(future), pending, claim, listener, settleHere);
        passOn(commits, held);
        return returns == ListenerShape.Returns.FUTURE
            ? CompletableFuture.completedFuture(value)
            : MonoOutcomes.of(value);
      default:
        pending.listenerSucceeded();
        settle(listener, record, pending, claim, source);
        passOn(commits, held);
        // Completed rather than null: spring-kafka acknowledges an asynchronous listener's
        // record only when its future completes, and would stall the partition on a null.
        return result == null ? listener.shape.duplicateResult() : result;
    }
  }

  /**
   * The listener's outcome is settled: the commits it made through its consumer are sent, then an
   * acknowledgment it made is passed on (whose commit, under {@code MANUAL_IMMEDIATE}, would be
   * held too), whatever sending the commits throws.
   */
  private static void passOn(
      PollAwareConsumer.@Nullable CommitHold commits, @Nullable HeldAcknowledgment held) {
    HeldCallEnd.passOn(commits, () -> release(held));
  }

  /**
   * The listener was not called for {@code claim} ({@code thrown}, an {@code Error} say, came
   * first): a held claim is given back, without counting an attempt, rather than left PROCESSING
   * under a lease the executor renews for as long as the process lives, which would hold the key's
   * every delivery, to this consumer too, until a restart. In mode TRANSACTIONAL the claim is the
   * listener's transaction's, which {@code thrown} rolls back.
   */
  private static void giveBack(DedupClaim claim, IdempotentExecutor executor, Throwable thrown) {
    if (executor.mode() != DedupMode.SEPARATE || claim.isDuplicate() || claim.isEnded()) {
      return;
    }
    try {
      claim.release();
    } catch (RuntimeException e) {
      thrown.addSuppressed(e);
    }
  }

  private void tag(String outcome) {
    ObservationOutcomeTagger tagger = outcomeTagger;
    if (tagger != null) {
      tagger.tag(outcome);
    }
  }

  /**
   * Passes on an acknowledgment the listener made, once the outcome is settled: at once without a
   * transaction, or in a Kafka transaction (whose offsets go with it); else after the transaction
   * on this thread commits (the listener's own in mode TRANSACTIONAL, which carries the dedup row,
   * or the container's), never if it rolls back, so the redelivery runs the listener again. An
   * offset committed before that commit (ack mode {@code MANUAL_IMMEDIATE}) would pass a record
   * whose effects and dedup row a crash, or a commit that fails, then discards: the record lost.
   */
  private static void release(@Nullable HeldAcknowledgment held) {
    if (held == null) {
      return;
    }
    if (ListenerOutcomes.inKafkaTransaction()
        || !TransactionSynchronizationManager.isSynchronizationActive()) {
      held.release();
      return;
    }
    // Registered after the synchronization that writes SUCCESS on commit: a SUCCESS that cannot be
    // written throws before this runs, and the record is not acknowledged.
    TransactionSynchronizationManager.registerSynchronization(
        new TransactionSynchronization() {
          @Override
          public void afterCommit() {
            held.release();
          }
        });
  }

  /**
   * Waits for the listener's future and writes its outcome, before the container sees the record
   * done. spring-kafka acknowledges a future that fails (and hands it to the error handler, if at
   * all, only after committing that acknowledgment), so a failure handed over as a future would let
   * the offset pass a FAILED record; thrown from the listener call instead, it reaches the
   * container's error handler as any listener failure does, the record uncommitted.
   *
   * <p>The wait is bounded by {@link #asyncListenerTimeout}, and ends when the container stops, or
   * the child of a concurrent container that delivers the record (spring-kafka would wait for the
   * listener, keeping the stop, and a JVM's exit, waiting): then the lease is no longer renewed and
   * the record is retried later. Its redelivery finds the key in progress until the lease runs out,
   * then takes it over; a first call completing after that has its outcome refused by the fencing
   * of the takeover. Failing the key instead would let the redelivery run the listener at once,
   * beside a first call that may still be running.
   *
   * <p>With {@code settleHere}, the listener runs in a transaction of the container, and the
   * outcome is settled on this thread by {@code settleHere} once the future completed, which leaves
   * it to the transaction's end. A wait that ends first leaves the outcome to the future's
   * completion, and as a failure: the transaction ends without the listener's work.
   *
   * @param settleHere settles the outcome on this thread; null to settle it as the future completes
   * @return the listener's value, for a future or Mono that already completed
   * @throws Throwable what the listener's future failed with (as {@link AttemptLimit#toThrow}
   *     passes it on), why SUCCESS could not be written, or {@link AsyncListenerTimeoutException}
   */
  private @Nullable Object awaitSettled(
      CompletableFuture<?> future,
      ListenerOutcomes.Pending pending,
      DedupClaim claim,
      IdempotentListenerMethod listener,
      @Nullable Runnable settleHere)
      throws Throwable {
    CompletableFuture<?> settled =
        settleHere == null ? settledWhenDone(future, pending, listener, claim) : future;
    Duration timeout = asyncListenerTimeout;
    long deadline = System.nanoTime() + timeout.toNanos();
    try {
      while (true) {
        long left = deadline - System.nanoTime();
        try {
          Object value = settled.get(Math.min(left, STOP_CHECK.toNanos()), TimeUnit.NANOSECONDS);
          if (settleHere != null) {
            pending.listenerSucceeded(); // on this thread, which tells the transaction it ran in
            settleHere.run();
          }
          return value;
        } catch (TimeoutException e) {
          boolean stopping = CurrentRecordInterceptor.containerStopping();
          if (!stopping && left > STOP_CHECK.toNanos()) {
            continue;
          }
          claim.stopRenewing();
          if (settleHere != null) {
            settleWhenDoneAfterTransaction(future, pending, listener, claim);
          } else if (settled.isDone()) {
            return settled.get(); // it came as the wait ended, and its outcome is written
          }
          throw new AsyncListenerTimeoutException(
              "The "
                  + asyncResult(listener)
                  + " of "
                  + listener
                  + (stopping
                      ? " had not completed when its container stopped"
                      : " did not complete within consumer-dedup.async-listener-timeout ("
                          + timeout
                          + ")")
                  + ": its lease is no longer renewed, and the record is retried once the lease"
                  + " has run out; "
                  + (settleHere != null
                      ? "the container's transaction ends without the call's work, so the"
                          + " outcome the call reports later is written as FAILED"
                      : "an outcome the call reports before then is still written"),
              claim.key(),
              claim.source());
        }
      }
    } catch (CancellationException cancelled) {
      // Waited for as it is in a transaction of the container (not through settledWhenDone),
      // whose rollback does not stop the work behind it either: that work runs on the
      // application's own thread and commits its effects anyway. Recorded FAILED, the
      // after-rollback seek ran the listener again at once, beside it; never settled, the claim
      // stayed PROCESSING under a lease renewed for as long as the process lived.
      if (settleHere != null) {
        pending.leaveToLease();
      }
      throw givenUpWhileRunning(listener, claim, cancelled);
    } catch (ExecutionException e) {
      Throwable cause =
          e.getCause() == null
              ? null
              : WrappedConsumerCastException.naming(
                  e.getCause(), listener, claim.key(), claim.source());
      if (cause != null && givenUpOn(cause)) {
        if (settleHere != null) {
          pending.leaveToLease(); // see the CancellationException above
        }
        throw givenUpWhileRunning(listener, claim, cause);
      }
      if (settleHere != null) {
        pending.listenerFailed(cause != null ? cause : e);
        settleHere.run();
      }
      throw cause != null ? attempts.toThrow(claim, cause) : e;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      // Its outcome is written when it completes, and the redelivery finds it then; if it never
      // does, the key goes to another delivery once the lease runs out, not at the process's end.
      claim.stopRenewing();
      if (settleHere != null) {
        settleWhenDoneAfterTransaction(future, pending, listener, claim);
      }
      throw new IllegalStateException(
          "Interrupted while waiting for the "
              + asyncResult(listener)
              + " of "
              + listener
              + " to complete",
          e);
    }
  }

  /**
   * The listener's stage as a future to wait for. A stage that refuses to be one ({@code
   * toCompletableFuture()} may throw {@code UnsupportedOperationException}, as read-only stages
   * over another library's future do) still runs its work: taken for the listener's failure, its
   * key was FAILED at once and the redelivery ran the listener beside that work, applying the
   * record twice. Its completion is followed instead.
   */
  private static CompletableFuture<?> awaitable(CompletionStage<?> stage) {
    try {
      return stage.toCompletableFuture();
    } catch (RuntimeException refused) {
      CompletableFuture<Object> completion = new CompletableFuture<>();
      try {
        stage.whenComplete(
            (value, error) -> {
              if (error != null) {
                completion.completeExceptionally(error);
              } else {
                completion.complete(value);
              }
            });
      } catch (RuntimeException | Error cannotFollow) {
        cannotFollow.addSuppressed(refused);
        throw cannotFollow;
      }
      return completion;
    }
  }

  /** What the listener returned, as its messages name it. */
  private static String asyncResult(IdempotentListenerMethod listener) {
    return listener.shape.returns == ListenerShape.Returns.MONO ? "Mono" : "future";
  }

  /**
   * The wait for a future in a transaction of the container ended first: the transaction ends
   * without the listener's work (it is rolled back, or committed without its output), so the
   * outcome written when the future completes is FAILED, and the redelivery runs the listener
   * again.
   */
  private static void settleWhenDoneAfterTransaction(
      CompletableFuture<?> future,
      ListenerOutcomes.Pending pending,
      IdempotentListenerMethod listener,
      DedupClaim claim) {
    pending.rolledBack(
        new IllegalStateException(
            "the container's transaction ended before the listener's future completed"));
    settledWhenDone(future, pending, listener, claim);
  }

  /**
   * The listener's future was given up on: cancelled (by the application, or a timeout of its own),
   * or failed with a {@code TimeoutException} ({@link #givenUpOn}). None stops anything, nor does
   * the rollback of a transaction of the container, so the work behind it may still run and apply
   * its effect. Recorded FAILED, the redelivery ran the listener at once, beside that work. Its
   * outcome unknown, the key is left to its lease (no longer renewed, see {@link
   * ListenerOutcomes.Pending#leaveToLease}), as after a crash: the redelivery waits until the lease
   * has run out, then takes the key over.
   */
  private static AsyncListenerTimeoutException givenUpWhileRunning(
      IdempotentListenerMethod listener, DedupClaim claim, Throwable givenUp) {
    return new AsyncListenerTimeoutException(
        "The "
            + asyncResult(listener)
            + " of "
            + listener
            + (givenUp instanceof CancellationException
                ? " was cancelled, which does not stop the work behind it"
                : " timed out, which does not stop the work behind it")
            + ": its lease is no longer renewed, and the record is retried once the lease has run"
            + " out (as after a crash), not beside work that may still apply its effect. Complete"
            + " the future exceptionally with the failure instead, once the work has stopped, to"
            + " have the record retried at once",
        claim.key(),
        claim.source(),
        givenUp);
  }

  /**
   * Whether the listener's future failed with {@code cause} perhaps without its work having ended:
   * it was cancelled, or a timeout gave up on it ({@code orTimeout}, another library's time
   * limiter, a scheduler of the application's own), none of which stops the work. Where it was made
   * cannot tell a timeout that gave up from one the work itself ended with: taken for the work's, a
   * given-up future was retried beside the work still running, applying its record twice; taken for
   * a given-up one, the work's own timeout waits for the lease before its retry. The second is the
   * one that costs no double charge.
   */
  private static boolean givenUpOn(Throwable cause) {
    return cause instanceof CancellationException || cause instanceof TimeoutException;
  }

  /** A future that completes once the listener's does and its outcome is written. */
  private static CompletableFuture<Object> settledWhenDone(
      CompletableFuture<?> future,
      ListenerOutcomes.Pending pending,
      IdempotentListenerMethod listener,
      DedupClaim claim) {
    return future.handle(
        (value, error) -> {
          Throwable thrown =
              error instanceof CompletionException && error.getCause() != null
                  ? error.getCause()
                  : error;
          // Named here, where the failure is recorded, and thrown so named.
          Throwable cause =
              thrown == null
                  ? null
                  : WrappedConsumerCastException.naming(
                      thrown, listener, claim.key(), claim.source());
          if (cause != null && givenUpOn(cause)) {
            pending.leaveToLease(); // see givenUpWhileRunning
            throw new CompletionException(cause);
          }
          if (cause == null) {
            pending.listenerSucceeded();
          } else {
            pending.listenerFailed(cause);
          }
          pending.settle();
          if (cause != null) {
            throw new CompletionException(cause);
          }
          return value;
        });
  }

  /**
   * Writes the outcome now, or leaves it to the end of the transaction the listener runs in.
   *
   * @throws DedupException SUCCESS could not be written now; the container must not acknowledge the
   *     record (it is retried later and is then a duplicate)
   */
  private static void settle(
      IdempotentListenerMethod listener,
      ConsumerRecord<Object, Object> record,
      ListenerOutcomes.Pending pending,
      DedupClaim claim,
      String source) {
    boolean synchronizing = TransactionSynchronizationManager.isSynchronizationActive();
    if (ListenerOutcomes.inKafkaTransaction()) {
      List<?> batch =
          CurrentRecordInterceptor.isCurrent(record) ? null : CurrentBatch.batchOf(record);
      if (batch != null) {
        // A batch listener's call with one of its records: the batch's transaction decides.
        if (synchronizing) {
          ListenerOutcomes.afterTransaction(pending, false); // notes a rollback of the inner one
        }
        ListenerOutcomes.deferToBatch(pending, batch);
        return;
      }
      if (!CurrentRecordInterceptor.isCurrent(record)) {
        pending.rolledBack(new IllegalStateException("no container support"));
        pending.settle();
        throw new DedupConfigurationException(
            "Listener "
                + listener
                + " runs in a Kafka transaction, but its container does not run consumer-dedup's"
                + " record interceptor, so SUCCESS could only be written before that transaction"
                + " commits: configure the container with DedupContainers.configure(container)",
            claim.key(),
            source);
      }
      if (synchronizing) {
        ListenerOutcomes.afterTransaction(pending, false); // notes a rollback of the inner one
      }
      ListenerOutcomes.deferToContainer(pending);
    } else if (synchronizing) {
      ListenerOutcomes.afterTransaction(pending, true);
    } else {
      pending.settle();
    }
  }

  private Optional<IdempotentListenerMethod> listenerOf(MethodInvocation invocation) {
    Method method = invocation.getMethod();
    Object target = invocation.getThis();
    Method specific =
        target != null
            ? AopUtils.getMostSpecificMethod(method, AopUtils.getTargetClass(target))
            : method;
    return methods.computeIfAbsent(
        specific, m -> Optional.ofNullable(IdempotentListenerMethod.of(m, null, beanFactory)));
  }
}
