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
import io.consumerdedup.spring.internal.CurrentBatch;
import io.consumerdedup.spring.internal.ListenerOutcomes;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import org.aopalliance.intercept.MethodInvocation;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.common.TopicPartition;
import org.jspecify.annotations.Nullable;
import org.springframework.beans.factory.BeanFactory;
import org.springframework.kafka.listener.BatchListenerFailedException;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.kafka.support.KafkaUtils;
import org.springframework.messaging.Message;
import org.springframework.transaction.support.TransactionSynchronizationManager;

/**
 * One call of an {@link Idempotent} batch listener: derives each record's key as a record listener
 * does, claims the keys of the whole batch in one round trip ({@link IdempotentExecutor#claimAll}),
 * and invokes the method with only the records it holds, in a list of the same form. Their outcomes
 * are written before the call returns to the container (SUCCESS marks together, in one store call).
 *
 * <p>A record that cannot be handled now stops the batch there: a record without a usable key, a
 * conflicting payload, a key another consumer holds, a store that cannot be reached. The records
 * before it are handled, and spring-kafka is told its index with a {@link
 * BatchListenerFailedException} whose cause is consumer-dedup's exception: the application's {@code
 * DefaultErrorHandler} commits the records before it and dead-letters it at once when the cause is
 * not retryable ({@link DedupErrorClassification}); {@link RetryLaterErrorHandler} commits them and
 * makes it wait when it is to be retried later. A failure of the method at a record (a {@code
 * BatchListenerFailedException} of its own) is passed on with the index translated to the
 * container's batch: the records before it SUCCESS, it FAILED, those after it released without
 * counting an attempt. Any other exception leaves every claimed record FAILED: the method's state
 * is unknown, so all are retried. Records the method acknowledged ({@code acknowledge(i)} of its
 * {@link Acknowledgment}) are done by its word: their SUCCESS is written at once, and stands.
 *
 * <p>Attempts are limited per key as for record listeners ({@link AttemptLimit}): a record the
 * method fails at on its last attempt allowed, and a record whose key already failed that often
 * (its claim given back, the method not called for it), stop the batch with a {@link
 * DedupAttemptsExhaustedException}, which the error handler does not retry. A failure without a
 * record leaves every record's attempts counted; each is given up at its next delivery once they
 * are spent.
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

  /** Where the batch stops: the first record that cannot be handled now, and why. */
  private record Stop(int index, RuntimeException cause) {}

  /** The records handed to the method: their place in the container's batch, and their claim. */
  private static final class Kept {
    final List<Object> elements = new ArrayList<>();
    final List<ConsumerRecord<Object, Object>> records = new ArrayList<>();
    final List<Integer> batchIndexes = new ArrayList<>();
    final List<@Nullable DedupClaim> claims = new ArrayList<>();
    private final List<@Nullable CompletableFuture<Void>> marks = new ArrayList<>();

    void add(
        Object element,
        ConsumerRecord<Object, Object> record,
        int batchIndex,
        @Nullable DedupClaim claim) {
      elements.add(element);
      records.add(record);
      batchIndexes.add(batchIndex);
      claims.add(claim);
      marks.add(null);
    }

    int size() {
      return elements.size();
    }

    /**
     * The write of the i-th record's SUCCESS, started on the first call (by the method's
     * acknowledgment, or when the batch ends); null for a record without a claim or whose claim
     * ended otherwise.
     */
    @Nullable CompletableFuture<Void> markAsync(int i) {
      CompletableFuture<Void> mark = marks.get(i);
      DedupClaim claim = claims.get(i);
      if (mark == null && claim != null && !claim.isEnded()) {
        mark = claim.completeAsync();
        marks.set(i, mark);
      }
      return mark;
    }
  }

  @Nullable Object invoke(MethodInvocation invocation) throws Throwable {
    @Nullable Object[] arguments = invocation.getArguments();
    int batchIndex = listener.shape.batchIndex;
    Object batchArgument = Objects.requireNonNull(arguments[batchIndex], "batch argument");
    List<Object> elements = elementsOf(batchArgument);
    List<ConsumerRecord<Object, Object>> records = recordsOf(elements);
    if (records.isEmpty()) {
      return invocation.proceed();
    }
    refuseContainerTransaction(records.get(0));

    String groupId = KafkaUtils.getConsumerGroupId();
    List<IdempotentExecutor.Delivery> deliveries = new ArrayList<>();
    int[] deliveryOf = new int[records.size()];
    Stop stop = null;
    for (int i = 0; i < records.size(); i++) {
      ConsumerRecord<Object, Object> record = records.get(i);
      Object element = elements.get(i);
      KeyEvaluation call =
          KeyEvaluation.ofBatchRecord(
              listener,
              record,
              element instanceof Message<?> message ? message.getPayload() : record.value(),
              beanFactory);
      RecordKeyResolver<Object, Object> keys = call.resolver(missingKeyPolicy, groupId, executor);
      try {
        Optional<DedupKey> key = keys.resolve(record);
        if (key.isEmpty()) {
          deliveryOf[i] = -1; // no key, and the policy says to process it without dedup
          continue;
        }
        deliveryOf[i] = deliveries.size();
        deliveries.add(
            new IdempotentExecutor.Delivery(key.get(), call.fingerprint(), keys.source(record)));
      } catch (DedupException e) {
        stop = new Stop(i, e);
        break;
      }
    }

    // One round trip for the whole batch; if the store cannot be reached, the batch waits.
    DedupClaims claims = deliveries.isEmpty() ? null : executor.claimAll(deliveries);
    try {
      Kept kept = new Kept();
      int end = stop == null ? records.size() : stop.index();
      Map<DedupKey, Optional<String>> held = new HashMap<>();
      for (int i = 0; i < end; i++) {
        int delivery = deliveryOf[i];
        if (delivery < 0) {
          kept.add(elements.get(i), records.get(i), i, null);
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
                new Stop(
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
          stop = new Stop(i, e);
          break;
        }
        if (claim.isDuplicate()) {
          continue;
        }
        DedupAttemptsExhaustedException exhausted = attempts.beyondLimit(claim, executor);
        if (exhausted != null) {
          stop = new Stop(i, exhausted);
          break;
        }
        held.put(wanted.key(), Optional.ofNullable(wanted.fingerprint()));
        kept.add(elements.get(i), records.get(i), i, claim);
      }
      return invokeWith(invocation, arguments, batchArgument, records, kept, stop);
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
      Object batchArgument,
      List<ConsumerRecord<Object, Object>> records,
      Kept kept,
      @Nullable Stop stop)
      throws Throwable {
    Acknowledgment acknowledgment = listener.shape.acknowledgment(arguments);
    if (kept.size() == 0) {
      if (stop != null) {
        throw failedAt(records, stop);
      }
      if (acknowledgment != null) {
        // Only duplicates: as spring-kafka does for records it filters out, else in a manual ack
        // mode their offsets are never committed.
        acknowledgment.acknowledge();
      }
      return listener.shape.duplicateResult();
    }
    arguments[listener.shape.batchIndex] = filtered(batchArgument, kept);
    HeldBatchAcknowledgment heldAck = null;
    if (acknowledgment != null) {
      heldAck = new HeldBatchAcknowledgment(acknowledgment, kept);
      arguments[listener.shape.ackIndex] = heldAck;
    }
    Object result;
    try {
      result = invocation.proceed();
    } catch (Throwable error) {
      int failed = failedIndex(error, kept);
      if (failed < 0) {
        // The method's state is unknown: every record is retried.
        failAll(kept, 0, error);
        BatchListenerFailedException untranslatable = userBatchFailure(error);
        if (untranslatable != null) {
          // Its index is one of the filtered list, never to reach the container as such.
          throw new BatchListenerFailedException(
              "The listener failed at a record that is not in the batch it was given: "
                  + untranslatable.getMessage(),
              error,
              -1);
        }
        throw error;
      }
      Stop written = completeBefore(kept, failed);
      DedupClaim failedClaim = kept.claims.get(failed);
      // null: a record without key, processed without dedup; ended: the method had acknowledged
      // it, and its SUCCESS stands.
      Throwable thrown = error;
      if (failedClaim != null && !failedClaim.isEnded()) {
        // What the method failed with at the record, without its BatchListenerFailedException.
        BatchListenerFailedException failure = Objects.requireNonNull(userBatchFailure(error));
        Throwable cause = failure.getCause() != null ? failure.getCause() : failure;
        attempts.logFailure(failedClaim, cause);
        failedClaim.fail(cause);
        Throwable exhausted = attempts.toThrow(failedClaim, cause);
        if (exhausted != cause) {
          thrown = exhausted;
        }
      }
      Stop at = new Stop(kept.batchIndexes.get(failed), asRuntime(thrown));
      throw failedAt(records, written != null ? written : at);
    }
    if (heldAck != null && heldAck.nackIndex >= 0) {
      int nackAt = heldAck.nackIndex;
      Stop written = completeBefore(kept, nackAt);
      failAll(
          kept, nackAt, new IllegalStateException("the listener nacked the batch at " + nackAt));
      int batchNack =
          written != null ? Math.min(written.index(), kept.batchIndexes.get(nackAt)) : -1;
      heldAck.delegate.nack(
          batchNack >= 0 ? batchNack : kept.batchIndexes.get(nackAt), heldAck.nackSleep);
      return result;
    }
    Stop written = completeBefore(kept, kept.size());
    if (written != null) {
      stop = written; // before any stop of the walk: a kept record precedes it
    }
    if (stop != null) {
      // The error handler commits the records before it, whatever the listener acknowledged.
      throw failedAt(records, stop);
    }
    if (heldAck != null) {
      heldAck.release(kept);
    }
    return result;
  }

  /**
   * Writes SUCCESS for the kept records before {@code end}, in one store call, and waits for it.
   *
   * @return where the batch must stop: the first record whose SUCCESS is not written (the store
   *     unreachable, the key taken over), or null
   */
  private static @Nullable Stop completeBefore(Kept kept, int end) {
    List<@Nullable CompletableFuture<Void>> marks = new ArrayList<>();
    for (int i = 0; i < end; i++) {
      marks.add(kept.markAsync(i));
    }
    Stop first = null;
    for (int i = 0; i < marks.size(); i++) {
      CompletableFuture<Void> mark = marks.get(i);
      if (mark == null) {
        continue;
      }
      try {
        mark.get();
      } catch (ExecutionException e) {
        if (first == null) {
          first = new Stop(kept.batchIndexes.get(i), asRuntime(e.getCause()));
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        if (first == null) {
          first = new Stop(kept.batchIndexes.get(i), new IllegalStateException(e));
        }
      }
    }
    return first;
  }

  private void failAll(Kept kept, int from, Throwable error) {
    List<DedupClaim> failed = new ArrayList<>();
    for (int i = from; i < kept.size(); i++) {
      DedupClaim claim = kept.claims.get(i);
      if (claim != null && !claim.isEnded()) {
        failed.add(claim);
      }
    }
    if (failed.size() == 1) {
      attempts.logFailure(failed.get(0), error);
    } else if (!failed.isEmpty()) {
      attempts.logBatchFailure(failed, error);
    }
    failed.forEach(claim -> claim.fail(error));
  }

  /**
   * The index, in the list the method was given, of the record it reports failing at with a {@link
   * BatchListenerFailedException}; -1 if it reports none, or one outside that list.
   */
  private static int failedIndex(Throwable error, Kept kept) {
    BatchListenerFailedException failure = userBatchFailure(error);
    if (failure == null) {
      return -1;
    }
    ConsumerRecord<?, ?> record = failure.getRecord();
    if (record != null) {
      for (int i = 0; i < kept.size(); i++) {
        ConsumerRecord<?, ?> candidate = kept.records.get(i);
        if (candidate.offset() == record.offset()
            && candidate.partition() == record.partition()
            && candidate.topic().equals(record.topic())) {
          return i;
        }
      }
      return -1;
    }
    int index = failure.getIndex();
    return index >= 0 && index < kept.size() ? index : -1;
  }

  private static @Nullable BatchListenerFailedException userBatchFailure(Throwable error) {
    int depth = 0;
    for (Throwable current = error;
        current != null && depth < 32;
        current = current.getCause(), depth++) {
      if (current instanceof BatchListenerFailedException failure) {
        return failure;
      }
    }
    return null;
  }

  /** Tells spring-kafka the record of the container's batch where processing stopped, and why. */
  private BatchListenerFailedException failedAt(
      List<ConsumerRecord<Object, Object>> records, Stop stop) {
    ConsumerRecord<Object, Object> record = records.get(stop.index());
    return new BatchListenerFailedException(
        "@Idempotent batch listener "
            + listener
            + " stopped at "
            + KafkaUtils.format(record)
            + " (index "
            + stop.index()
            + " of the batch): "
            + stop.cause().getMessage(),
        stop.cause(),
        stop.index());
  }

  private static RuntimeException asRuntime(@Nullable Throwable error) {
    if (error instanceof RuntimeException runtime) {
      return runtime;
    }
    return new IllegalStateException(String.valueOf(error), error);
  }

  /** The batch argument's elements, in the container's order. */
  @SuppressWarnings("unchecked")
  private List<Object> elementsOf(Object batchArgument) {
    if (batchArgument instanceof ConsumerRecords<?, ?> consumerRecords) {
      List<Object> elements = new ArrayList<>(consumerRecords.count());
      consumerRecords.forEach(elements::add);
      return elements;
    }
    return new ArrayList<>((List<Object>) batchArgument);
  }

  /**
   * The records behind the elements: the elements themselves, or, for messages, the records the
   * container hands over on this thread, one per message in the same order.
   */
  @SuppressWarnings("unchecked")
  private List<ConsumerRecord<Object, Object>> recordsOf(List<Object> elements) {
    if (listener.shape.batch != ListenerShape.BatchShape.MESSAGES) {
      return (List<ConsumerRecord<Object, Object>>) (List<?>) elements;
    }
    List<ConsumerRecord<Object, Object>> records = CurrentBatch.records();
    if (records == null || records.size() != elements.size()) {
      throw new IllegalStateException(
          "@Idempotent batch listener "
              + listener
              + " takes List<Message<?>>, but "
              + (records == null
                  ? "its container does not run consumer-dedup's batch interceptor (the"
                      + " auto-configuration adds it to every listener container; for a"
                      + " container made by hand call DedupContainers.configure(container))"
                  : "its container handed over "
                      + records.size()
                      + " records for "
                      + elements.size()
                      + " messages")
              + ": take List<ConsumerRecord<K, V>> instead");
    }
    return records;
  }

  /** The batch argument with only the kept records, in the same form. */
  private Object filtered(Object batchArgument, Kept kept) {
    if (batchArgument instanceof ConsumerRecords<?, ?>) {
      Map<TopicPartition, List<ConsumerRecord<Object, Object>>> byPartition = new LinkedHashMap<>();
      for (ConsumerRecord<Object, Object> record : kept.records) {
        byPartition
            .computeIfAbsent(
                new TopicPartition(record.topic(), record.partition()), p -> new ArrayList<>())
            .add(record);
      }
      return new ConsumerRecords<>(byPartition, Map.of());
    }
    return new ArrayList<>(kept.elements);
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

  /**
   * The listener's {@link Acknowledgment}, held until the outcomes are written, so that no offset
   * is committed past a record whose SUCCESS is not recorded; indexes are translated from the list
   * the method was given to the container's batch. What the method acknowledges is done by its own
   * word: the SUCCESS of those records is written at once, in the background, so a process that
   * dies later in the batch runs only the records after them again.
   */
  private static final class HeldBatchAcknowledgment implements Acknowledgment {
    private final Acknowledgment delegate;
    private final Kept kept;
    private boolean acknowledged;
    private int partialIndex = -1;
    private int markedUpTo = -1;
    int nackIndex = -1;
    Duration nackSleep = Duration.ZERO;

    HeldBatchAcknowledgment(Acknowledgment delegate, Kept kept) {
      this.delegate = delegate;
      this.kept = kept;
    }

    @Override
    public void acknowledge() {
      acknowledged = true;
      markUpTo(kept.size() - 1);
    }

    @Override
    public void acknowledge(int index) {
      checkIndex(index);
      partialIndex = Math.max(partialIndex, index);
      markUpTo(index);
    }

    /** A listener acknowledging each record in turn starts each mark once, not the list again. */
    private void markUpTo(int index) {
      for (int i = markedUpTo + 1; i <= index; i++) {
        kept.markAsync(i);
      }
      markedUpTo = Math.max(markedUpTo, index);
    }

    @Override
    public void nack(Duration sleep) {
      nack(0, sleep);
    }

    @Override
    public void nack(int index, Duration sleep) {
      checkIndex(index);
      nackIndex = index;
      nackSleep = sleep;
    }

    private void checkIndex(int index) {
      if (index < 0 || index >= kept.size()) {
        throw new IllegalArgumentException(
            "index " + index + " is outside the batch of " + kept.size() + " records");
      }
    }

    @Override
    public boolean isOutOfOrderCommit() {
      return delegate.isOutOfOrderCommit();
    }

    /** Every outcome is written: passes on what the listener acknowledged. */
    void release(Kept kept) {
      if (acknowledged) {
        delegate.acknowledge();
      } else if (partialIndex >= 0) {
        delegate.acknowledge(kept.batchIndexes.get(partialIndex));
      }
    }
  }
}
