package io.consumerdedup.spring;

import io.consumerdedup.core.ConflictPolicy;
import io.consumerdedup.core.DedupAttemptsExhaustedException;
import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupClaims;
import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupKeyConflictException;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.kafka.MissingKeyPolicy;
import io.consumerdedup.kafka.internal.RecordKeyResolver;
import io.consumerdedup.kafka.internal.RecordSources;
import io.consumerdedup.spring.internal.AttemptLimit;
import io.consumerdedup.spring.internal.DeserializationFailures;
import io.consumerdedup.spring.internal.ListenerOutcomes;
import io.consumerdedup.spring.internal.OwnTransactionWatch;
import io.consumerdedup.spring.internal.PollAwareConsumer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import org.aopalliance.intercept.MethodInvocation;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;
import org.springframework.beans.factory.BeanFactory;
import org.springframework.kafka.listener.BatchListenerFailedException;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.kafka.support.KafkaUtils;
import org.springframework.kafka.support.serializer.DeserializationException;
import org.springframework.transaction.CannotCreateTransactionException;
import org.springframework.transaction.support.TransactionSynchronizationManager;

/**
 * One call of an {@link Idempotent} batch listener: derives each record's key as a record listener
 * does, claims the keys of the whole batch in one round trip ({@link IdempotentExecutor#claimAll}),
 * and invokes the method with only the records it holds, in a list of the same form. Their outcomes
 * are written before the call returns to the container (SUCCESS marks together, in one store call).
 *
 * <p>A record that cannot be handled now stops the batch there: a record whose key or value the
 * consumer's {@code ErrorHandlingDeserializer} could not deserialize, a record without a usable
 * key, a conflicting payload, a key another consumer holds, a store that cannot be reached. The
 * records before it are handled, and spring-kafka is told the record with a {@link
 * BatchListenerFailedException} whose cause is consumer-dedup's exception: the application's {@code
 * DefaultErrorHandler} commits the records before it and dead-letters it at once when the cause is
 * not retryable ({@link DedupErrorClassification}); {@link RetryLaterErrorHandler} commits them and
 * makes it wait when it is to be retried later. A failure of the method at a record (a {@code
 * BatchListenerFailedException} of its own) is passed on naming the record of the container's
 * batch: the records before it SUCCESS, it FAILED, those after it released without counting an
 * attempt; unless the method's own transaction rolled back, undoing the records before it too: then
 * it is FAILED, the other claims are released, and the whole batch is retried (a nack at a record,
 * in a transaction that rolled back, is passed on at the batch's first record). Any other exception
 * leaves every claimed record FAILED: the method's state is unknown, so all are retried. Records
 * the method acknowledged ({@code acknowledge(i)} of its {@link Acknowledgment}) are done by its
 * word: their SUCCESS is written at once, and stands; acknowledged inside a transaction (the
 * method's {@code @Transactional} one), once that transaction has committed, so that a rollback
 * leaves them FAILED with the method's failure. Offset commits the method makes through its {@code
 * Consumer} argument are sent once every record of the batch is done and its outcome written, and
 * dropped otherwise ({@link PollAwareConsumer#holdCommits}).
 *
 * <p>Attempts are limited per key as for record listeners ({@link AttemptLimit}): a record the
 * method fails at on its last attempt allowed, and a record whose key already failed that often
 * (its claim given back, the method not called for it), stop the batch with a {@link
 * DedupAttemptsExhaustedException}, which the error handler does not retry. A failure without a
 * record leaves every record's attempts counted; each is given up at its next delivery once they
 * are spent.
 *
 * <p>This class keeps the order of a call; its parts are {@link BatchArgument} (the batch in the
 * form the method takes, and filtered), {@link KeptBatchRecords} (the records handed over, their
 * claims and SUCCESS marks), {@link HeldBatchAcknowledgment}, {@link BatchFailureIndex} (the
 * method's failure index translated to the container's batch) and {@link BatchStop}.
 */
final class IdempotentBatchInvocation {
  private final IdempotentListenerMethod listener;
  private final IdempotentExecutor executor;
  private final MissingKeyPolicy missingKeyPolicy;
  private final AttemptLimit attempts;
  private final @Nullable BeanFactory beanFactory;

  IdempotentBatchInvocation(
      IdempotentListenerMethod listener,
      IdempotentExecutor executor,
      MissingKeyPolicy missingKeyPolicy,
      AttemptLimit attempts,
      @Nullable BeanFactory beanFactory) {
    this.listener = listener;
    this.executor = executor;
    this.missingKeyPolicy = missingKeyPolicy;
    this.attempts = attempts;
    this.beanFactory = beanFactory;
  }

  @Nullable Object invoke(MethodInvocation invocation) throws Throwable {
    @Nullable Object[] arguments = invocation.getArguments();
    BatchArgument batch =
        BatchArgument.of(
            listener,
            Objects.requireNonNull(arguments[listener.shape.batchIndex], "batch argument"));
    List<ConsumerRecord<Object, Object>> records = batch.records;
    if (records.isEmpty()) {
      return invocation.proceed();
    }
    refuseContainerTransaction(records.get(0));

    String groupId = KafkaUtils.getConsumerGroupId();
    List<IdempotentExecutor.Delivery> deliveries = new ArrayList<>();
    int[] deliveryOf = new int[records.size()];
    BatchStop stop = null;
    for (int i = 0; i < records.size(); i++) {
      ConsumerRecord<Object, Object> record = records.get(i);
      DeserializationException undeserialized = DeserializationFailures.first(record);
      if (undeserialized != null) {
        // spring-kafka hands a batch listener the record with a null in place of what its
        // ErrorHandlingDeserializer could not read: called with it, the method took the null for
        // the record and its key was marked SUCCESS. Stopped here, the error handler gets the
        // failure, which it does not retry, and its recoverer the record's bytes.
        stop = new BatchStop(i, undeserialized);
        break;
      }
      KeyEvaluation evaluation =
          KeyEvaluation.ofBatchRecord(listener, record, batch.payload(i), beanFactory);
      RecordKeyResolver<Object, Object> keys =
          evaluation.resolver(missingKeyPolicy, groupId, executor);
      try {
        Optional<DedupKey> key = keys.resolve(record);
        if (key.isEmpty()) {
          deliveryOf[i] = -1; // no key, and the policy says to process it without dedup
          continue;
        }
        deliveryOf[i] = deliveries.size();
        deliveries.add(
            new IdempotentExecutor.Delivery(
                key.get(), evaluation.fingerprint(), keys.source(record)));
      } catch (DedupException e) {
        stop = new BatchStop(i, e);
        break;
      }
    }

    // One round trip for the whole batch; if the store cannot be reached, the batch waits.
    DedupClaims claims = deliveries.isEmpty() ? null : executor.claimAll(deliveries);
    try {
      KeptBatchRecords kept = new KeptBatchRecords();
      int end = stop == null ? records.size() : stop.index();
      Map<DedupKey, Optional<String>> held = new HashMap<>();
      for (int i = 0; i < end; i++) {
        int delivery = deliveryOf[i];
        if (delivery < 0) {
          kept.add(batch.elements.get(i), records.get(i), i, null);
          continue;
        }
        IdempotentExecutor.Delivery wanted = deliveries.get(delivery);
        Optional<String> earlier = held.get(wanted.key());
        if (earlier != null) {
          // A copy of a record this very call applies: a duplicate, unless its payload differs.
          String fingerprint = wanted.fingerprint();
          if (earlier.isPresent()
              && fingerprint != null
              && !earlier.get().equals(fingerprint)
              && executor.conflictPolicy() == ConflictPolicy.THROW) {
            stop =
                new BatchStop(
                    i,
                    new DedupKeyConflictException(
                        wanted.key(), earlier.get(), fingerprint, wanted.source()));
            break;
          }
          continue;
        }
        DedupClaim claim;
        try {
          claim = Objects.requireNonNull(claims).get(delivery);
        } catch (RuntimeException e) {
          // In progress elsewhere, a conflict, an earlier outcome not written yet.
          stop = new BatchStop(i, e);
          break;
        }
        if (claim.isDuplicate()) {
          continue;
        }
        DedupAttemptsExhaustedException exhausted = attempts.beyondLimit(claim, executor);
        if (exhausted != null) {
          stop = new BatchStop(i, exhausted);
          break;
        }
        held.put(wanted.key(), Optional.ofNullable(wanted.fingerprint()));
        kept.add(batch.elements.get(i), records.get(i), i, claim);
      }
      return invokeWith(invocation, arguments, batch, kept, stop);
    } finally {
      if (claims != null) {
        // The claims of records the method never saw, without counting an attempt.
        claims.releaseUnended();
      }
    }
  }

  private @Nullable Object invokeWith(
      MethodInvocation invocation,
      @Nullable Object[] arguments,
      BatchArgument batch,
      KeptBatchRecords kept,
      @Nullable BatchStop stop)
      throws Throwable {
    List<ConsumerRecord<Object, Object>> records = batch.records;
    Acknowledgment acknowledgment = listener.shape.acknowledgment(arguments);
    if (kept.size() == 0) {
      if (stop != null) {
        throw stop.failure(listener, records);
      }
      if (acknowledgment != null && listener.acknowledgesItsRecord) {
        // Only duplicates: as spring-kafka does for records it filters out, else in a manual ack
        // mode their offsets are never committed. A method a listener calls leaves the batch to
        // that listener, which may go on to a method that fails.
        acknowledgment.acknowledge();
      }
      return listener.shape.duplicateResult();
    }
    arguments[listener.shape.batchIndex] = batch.filtered(kept);
    HeldBatchAcknowledgment heldAck =
        acknowledgment != null ? new HeldBatchAcknowledgment(acknowledgment, kept) : null;
    PollAwareConsumer<?, ?> committer = listener.shape.handOver(arguments, acknowledgment, heldAck);
    PollAwareConsumer.CommitHold commits = committer == null ? null : committer.holdCommits();
    try {
      return invokeHoldingCommits(invocation, batch, kept, stop, heldAck, commits);
    } finally {
      if (commits != null) {
        commits.release(false); // the batch is not done: its commits are dropped
      }
    }
  }

  private @Nullable Object invokeHoldingCommits(
      MethodInvocation invocation,
      BatchArgument batch,
      KeptBatchRecords kept,
      @Nullable BatchStop stop,
      @Nullable HeldBatchAcknowledgment heldAck,
      PollAwareConsumer.@Nullable CommitHold commits)
      throws Throwable {
    List<ConsumerRecord<Object, Object>> records = batch.records;
    Object result;
    OwnTransactionWatch ownTransaction = OwnTransactionWatch.callStarts();
    if (heldAck != null) {
      heldAck.callStarts(ownTransaction);
    }
    try {
      result = invocation.proceed();
    } catch (Throwable error) {
      if (error instanceof CannotCreateTransactionException notOpened
          && !ownTransaction.reachedWithinTransaction()) {
        // The method's own transaction could not be opened (its database down, no pool
        // connection in time): the method never ran. Recorded FAILED, the outage spent an attempt
        // of every record and the error handler's tries, and the batch was given up, never
        // applied. Its claims are given back uncounted (invoke) and the batch waits.
        throw IdempotentListenerInterceptor.transactionNotOpened(listener, "", notOpened);
      }
      if (ownTransaction.committedAfterReturning()) {
        // Thrown past the commit of the method's own transaction (an afterCommit hook of the
        // application's): the batch's effects are committed, so its records are SUCCESS, and the
        // retry the failure brings finds duplicates instead of applying them a second time.
        BatchStop written = kept.completeBefore(kept.size());
        throw written != null ? written.failure(listener, records) : error;
      }
      int failed = BatchFailureIndex.in(error, kept.records);
      if (failed < 0) {
        // The method's state is unknown: every record is retried.
        Throwable failure = WrappedConsumerCastException.naming(error, listener, null, null);
        kept.listenerThrew(0, kept.size(), failure, attempts);
        throw BatchFailureIndex.untranslatable(failure);
      }
      DedupClaim failedClaim = kept.claims.get(failed);
      Throwable cause = BatchFailureIndex.causeAt(error);
      Throwable failure =
          failedClaim == null
              ? cause
              : WrappedConsumerCastException.naming(
                  cause, listener, failedClaim.key(), failedClaim.source());
      if (failed > 0 && ownTransaction.rollback() != null) {
        // The method's own transaction rolled back (@Transactional on the exception): the records
        // before the one it failed at are undone too, whatever its report says. Recorded SUCCESS,
        // and committed by the error handler as the report has it, they were never applied. That
        // record is FAILED, the others' claims are given back uncounted (invoke), and the whole
        // batch is retried.
        if (failedClaim != null && !failedClaim.isEnded()) {
          attempts.listenerThrew(failedClaim, failure);
        }
        throw BatchFailureIndex.rolledBackBefore(failure == cause ? error : failure);
      }
      BatchStop written = kept.completeBefore(failed);
      // null: a record without key, processed without dedup; ended: the method had acknowledged
      // it, and its SUCCESS stands.
      Throwable thrown = error;
      if (failedClaim != null && !failedClaim.isEnded()) {
        attempts.listenerThrew(failedClaim, failure);
        Throwable exhausted = attempts.toThrow(failedClaim, failure);
        if (exhausted != cause) {
          thrown = exhausted;
        }
      }
      BatchStop at = BatchStop.at(kept.batchIndexes.get(failed), thrown);
      throw (written != null ? written : at).failure(listener, records);
    } finally {
      ownTransaction.callEnded();
      if (heldAck != null) {
        heldAck.callEnds();
      }
    }
    Throwable undone = ownTransaction.rollback();
    if (undone != null) {
      // The method returned, but its transaction rolled back (marked rollback-only): nothing of
      // the batch is applied, and SUCCESS would have a later copy of each key skipped.
      kept.fail(
          0,
          kept.size(),
          new IllegalStateException(
              "The listener returned, but its transaction rolled back: " + undone, undone),
          attempts);
    }
    if (heldAck != null && heldAck.nackIndex() >= 0 && undone != null) {
      // Nacked at a record, but the transaction rolled back (marked rollback-only): the records
      // before that one are undone too, and FAILED above. Nacked where the method said, the
      // container committed them as done: never applied. The batch comes again from its start.
      dropListenersCommits(commits);
      heldAck.nackAt(kept.batchIndexes.get(0));
      return result;
    }
    if (heldAck != null && heldAck.nackIndex() >= 0) {
      int nackAt = heldAck.nackIndex();
      BatchStop written = kept.completeBefore(nackAt);
      // The nacked record failed; the records after it were not tried: their claims are given
      // back as those of records the method never saw, without an attempt counted. Recorded
      // FAILED, each nack of one record counted an attempt against every record behind it, which
      // a few nacks left dead-lettered as out of attempts without ever being tried.
      kept.fail(
          nackAt,
          nackAt + 1,
          new IllegalStateException("the listener nacked the batch at " + nackAt),
          attempts);
      int batchNack =
          written != null ? Math.min(written.index(), kept.batchIndexes.get(nackAt)) : -1;
      dropListenersCommits(commits);
      heldAck.nackAt(batchNack >= 0 ? batchNack : kept.batchIndexes.get(nackAt));
      return result;
    }
    BatchStop written = kept.completeBefore(kept.size());
    if (written != null) {
      stop = written; // before any stop of the walk: a kept record precedes it
    }
    if (stop != null) {
      // The error handler commits the records before it, whatever the listener acknowledged.
      throw stop.failure(listener, records);
    }
    // Every record done, its outcome written.
    HeldCallEnd.passOn(
        commits,
        () -> {
          if (heldAck != null) {
            heldAck.release();
          }
        });
    return result;
  }

  /**
   * Before a nack is passed on: the listener's commits pass the nacked record and are dropped, and
   * the commit spring-kafka's nack itself makes through the same consumer (of the records before
   * the nacked one, in ack mode MANUAL_IMMEDIATE) must go out. Still held, it was dropped with
   * them, and those records, done, came again after a restart.
   */
  private static void dropListenersCommits(PollAwareConsumer.@Nullable CommitHold commits) {
    if (commits != null) {
      commits.release(false);
    }
  }

  /**
   * A batch in a transaction of its container (Kafka's, or a database transaction manager's) would
   * have its SUCCESS marks written before that transaction commits, and spring-kafka commits the
   * offsets of the records before a failed one in a transaction that then rolls back: refused, the
   * batch waits (logged) until the listener is configured otherwise.
   */
  private void refuseContainerTransaction(ConsumerRecord<Object, Object> first) {
    if (ListenerOutcomes.inKafkaTransaction()
        || TransactionSynchronizationManager.isSynchronizationActive()) {
      throw new DedupConfigurationException(
          "@Idempotent batch listener "
              + listener
              + " runs in a transaction of its container ("
              + (ListenerOutcomes.inKafkaTransaction() ? "Kafka's" : "a transaction manager's")
              + "), which consumer-dedup does not support for batch listeners: the outcomes of a"
              + " batch cannot wait for that transaction. Remove the container's transaction"
              + " manager (annotate the method @Transactional for database writes), or make it a"
              + " record listener",
          null,
          RecordSources.describe(first, KafkaUtils.getConsumerGroupId()));
    }
  }
}
