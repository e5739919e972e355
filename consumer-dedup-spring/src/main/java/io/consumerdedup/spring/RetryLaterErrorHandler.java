package io.consumerdedup.spring;

import io.consumerdedup.core.DedupException;
import io.consumerdedup.core.DedupExecutorClosedException;
import io.consumerdedup.core.DedupInProgressException;
import io.consumerdedup.core.DedupStoreUnavailableException;
import io.consumerdedup.core.Disposition;
import io.consumerdedup.spring.internal.Causes;
import io.consumerdedup.spring.internal.ComposedErrorHandlers;
import io.consumerdedup.spring.internal.ContainerPartitionHolds;
import io.consumerdedup.spring.internal.MissingKeyArguments;
import io.consumerdedup.spring.internal.RecordsInRetry;
import io.consumerdedup.spring.internal.RecoveredRecordLogger;
import io.consumerdedup.spring.internal.RecoveredRecordLogger.FailedRecovery;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.core.log.LogAccessor;
import org.springframework.kafka.KafkaException;
import org.springframework.kafka.listener.BatchListenerFailedException;
import org.springframework.kafka.listener.CommonErrorHandler;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.FailedRecordProcessor;
import org.springframework.kafka.listener.ListenerUtils;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.listener.SeekUtils;
import org.springframework.kafka.listener.adapter.AsyncRepliesAware;
import org.springframework.kafka.support.KafkaUtils;
import org.springframework.kafka.support.TopicPartitionOffset;
import org.springframework.transaction.CannotCreateTransactionException;

/**
 * Wraps the application's {@link CommonErrorHandler} so that a record consumer-dedup says to retry
 * later ({@link Disposition#RETRY_LATER}: another consumer holds its key, the dedup store is
 * unreachable, its outcome is not recorded yet) is never recovered or skipped, whatever the
 * application's back-off and recoverer: its partition is sought back to it and paused with a
 * back-off ({@link ContainerPartitionHolds}), no delivery attempt is counted, and other partitions
 * keep moving. This holds on every path of the application's handler, its in-memory retries of a
 * batch included. Every other exception goes to the application's handler unchanged; one
 * consumer-dedup says not to retry is logged at ERROR as it is handed over, unless the handler logs
 * the records it gives up on itself ({@link RecoveredRecordLogger}), and recovered at once even by
 * a handler that was retrying it and keeps its retry state when the exception changes. A record
 * whose recovery fails in the application's handler (its dead-letter topic refusing it) is held the
 * same way, with the same back-off, rather than handed over again at once; nothing is committed
 * past it.
 *
 * <p>{@link DedupContainers#configure} installs it on a container; the auto-configuration does so
 * for every listener container.
 */
public final class RetryLaterErrorHandler implements CommonErrorHandler {
  private static final Logger log = LoggerFactory.getLogger(RetryLaterErrorHandler.class);
  private static final LogAccessor SEEK_LOG = new LogAccessor(RetryLaterErrorHandler.class);

  private final CommonErrorHandler delegate;
  private final ContainerPartitionHolds holds;
  private final MissingKeyArguments missingKeys;
  private final boolean logsGivenUpRecords;

  /** The delegate's handlers that keep retry state: itself, or those inside a composite. */
  private final List<FailedRecordProcessor> retrying = new ArrayList<>();

  public RetryLaterErrorHandler(
      CommonErrorHandler delegate, ContainerPartitionHolds holds, MissingKeyArguments missingKeys) {
    this.delegate = Objects.requireNonNull(delegate, "delegate");
    this.holds = Objects.requireNonNull(holds, "holds");
    this.missingKeys = Objects.requireNonNull(missingKeys, "missingKeys");
    this.logsGivenUpRecords = RecoveredRecordLogger.isAddedTo(delegate);
    for (CommonErrorHandler handler : ComposedErrorHandlers.of(delegate)) {
      if (handler instanceof FailedRecordProcessor processor) {
        retrying.add(processor);
      }
    }
  }

  /** The application's handler, which receives everything that is not held. */
  public CommonErrorHandler delegate() {
    return delegate;
  }

  /** Holding seeks, so the container hands over the failed record and those after it. */
  @Override
  public boolean seeksAfterHandling() {
    return true;
  }

  @Override
  public void handleRemaining(
      Exception thrown,
      List<ConsumerRecord<?, ?>> records,
      Consumer<?, ?> consumer,
      MessageListenerContainer container) {
    Exception thrownException =
        missingKeys.translate(thrown, records.get(0), container.getGroupId());
    if (Disposition.of(thrownException) == Disposition.RETRY_LATER) {
      throw RecordsInRetry.of(
          hold(thrownException, records, consumer, container), records, container);
    }
    logIfGivenUp(thrownException, records.get(0));
    restartRetriesIfNotRetried(thrownException, records.get(0));
    RecoveredRecordLogger.takeFailedRecovery(); // one left by a handling that ended otherwise
    if (delegate.seeksAfterHandling()) {
      try {
        delegate.handleRemaining(thrownException, records, consumer, container);
      } catch (RuntimeException e) {
        throwIfRecoveryFailed(records, consumer, container);
        throw e;
      }
      throwIfRecoveryFailed(records, consumer, container);
      return;
    }
    // A handler that does not seek expects the container to go on with the records after the
    // failed one; seeking them back has the same effect, since none of them was processed.
    boolean handled = handledByDelegate(thrownException, records.get(0), consumer, container);
    if (!handled) {
      throwIfRecoveryFailed(records, consumer, container);
    }
    List<ConsumerRecord<?, ?>> again = handled ? records.subList(1, records.size()) : records;
    SeekUtils.doSeeksToBegin(again, consumer, SEEK_LOG);
    @Nullable KafkaException notHandled =
        handled
            ? null
            : new KafkaException(
                "Record not handled by " + delegate, KafkaException.Level.DEBUG, thrownException);
    if (!again.isEmpty() && awaitsOutOfOrderAcks(container)) {
      // The container waits for the acknowledgment of every record of the poll, those sought back
      // included, and pauses the consumer until it comes: for good, since they never come again.
      throw RecordsInRetry.of(
          notHandled != null
              ? notHandled
              : new KafkaException(
                  "Records after " + KafkaUtils.format(records.get(0)) + " sought back",
                  KafkaException.Level.DEBUG,
                  thrownException),
          again,
          container);
    }
    if (notHandled != null) {
      throw notHandled;
    }
  }

  /**
   * Whether the container accepts acknowledgments out of order ({@code asyncAcks}, or a listener
   * returning a future or Mono), and so waits for those of a poll's records. spring-kafka switches
   * such a container to ack mode {@code MANUAL} itself, whatever its properties say: read there, a
   * future listener in the default mode was taken for one that waits for nothing, and the consumer
   * stayed paused for good behind the records sought back after a failure the handler logged.
   */
  private static boolean awaitsOutOfOrderAcks(MessageListenerContainer container) {
    ContainerProperties properties = container.getContainerProperties();
    return properties.isAsyncAcks()
        || properties.getMessageListener() instanceof AsyncRepliesAware listener
            && listener.isAsyncReplies();
  }

  @Override
  public boolean handleOne(
      Exception thrown,
      ConsumerRecord<?, ?> record,
      Consumer<?, ?> consumer,
      MessageListenerContainer container) {
    Exception thrownException = missingKeys.translate(thrown, record, container.getGroupId());
    if (Disposition.of(thrownException) == Disposition.RETRY_LATER) {
      hold(thrownException, List.of(record), consumer, container);
      return false;
    }
    logIfGivenUp(thrownException, record);
    restartRetriesIfNotRetried(thrownException, record);
    return delegate.handleOne(thrownException, record, consumer, container);
  }

  /**
   * Whether the delegate, which does not seek, handled the record. One that throws did not, as the
   * container decides for such a handler when it is its own: the record comes again with those
   * after it, which this class seeks back instead of the container (who would not, for a handler
   * that seeks, and would go on past them). Its failure is a failed recovery ({@link
   * #throwIfRecoveryFailed}): taken again at once, a handler whose recovery kept throwing (its
   * dead-letter topic refusing the record) had the record run and fail again about twice a second,
   * an ERROR line each time, for as long as it threw.
   */
  private boolean handledByDelegate(
      Exception thrownException,
      ConsumerRecord<?, ?> record,
      Consumer<?, ?> consumer,
      MessageListenerContainer container) {
    try {
      return delegate.handleOne(thrownException, record, consumer, container);
    } catch (RuntimeException e) {
      RecoveredRecordLogger.noteFailedRecovery(record, e);
      return false;
    }
  }

  private void logIfGivenUp(Exception thrownException, ConsumerRecord<?, ?> record) {
    if (!logsGivenUpRecords) {
      RecoveredRecordLogger.logHandedOver(record, thrownException, delegate);
    }
  }

  /**
   * A record consumer-dedup says not to retry (its attempts spent, data a redelivery cannot change)
   * that the delegate is already retrying, after an earlier failure of it: the delegate forgets its
   * retries, so that it starts afresh and classifies this exception, which it does not retry. A
   * spring-kafka handler decides whether to retry a record only when it starts its back-off for it,
   * and again for a later failure only if the exception's type changed and it was not told to keep
   * its state ({@code setResetStateOnExceptionChange(false)}): told so, the record whose last
   * attempt failed went on with the back-off its first failure began, redelivered and its claim
   * given back as spent until the handler's retries were used up, the records behind it waiting.
   * The delegate keeps its retries per consumer thread, not per record: those of other partitions
   * of this consumer start afresh too, which the attempts counted in the dedup table still bound.
   * Inside spring-kafka's composite handlers, the one retrying the record forgets its retries; the
   * composite itself answers no delivery attempt.
   */
  private void restartRetriesIfNotRetried(Exception thrownException, ConsumerRecord<?, ?> record) {
    if (Disposition.of(thrownException) != Disposition.DEAD_LETTER) {
      return;
    }
    TopicPartitionOffset offset =
        new TopicPartitionOffset(record.topic(), record.partition(), record.offset());
    for (FailedRecordProcessor processor : retrying) {
      if (processor.deliveryAttempt(offset) > 1) {
        processor.clearThreadState();
      }
    }
  }

  /**
   * Holds the record whose recovery failed in the delegate's handling that just ended, if one did
   * (a {@code DeadLetterPublishingRecoverer} whose dead-letter topic refuses the record: too large
   * for it, not authorised, its broker down). spring-kafka's handlers seek it back (or return it as
   * remaining) and forget its failures, so the container handed it over again at once, its recovery
   * failing again, several ERROR lines a time, for as long as the recoverer failed. It waits the
   * back-off of a record to retry later instead ({@link ContainerPartitionHolds}), logged at ERROR
   * once per streak ({@link RecoveredRecordLogger#logRecoveryFailed}); nothing is committed past
   * it, and the records of a batch before it are committed, as the delegate does.
   */
  private void throwIfRecoveryFailed(
      List<ConsumerRecord<?, ?>> records,
      Consumer<?, ?> consumer,
      MessageListenerContainer container) {
    FailedRecovery failed = RecoveredRecordLogger.takeFailedRecovery();
    if (failed == null) {
      return;
    }
    int index = indexOf(records, failed.record());
    if (index < 0) {
      // Not a record in hand: nothing to hold, but the failure is still the user's to read.
      RecoveredRecordLogger.logRecoveryFailed(failed, null);
      return;
    }
    commitBefore(records, index, consumer, container);
    List<ConsumerRecord<?, ?>> held = records.subList(index, records.size());
    Duration wait = holds.hold(held, consumer, container);
    RecoveredRecordLogger.logRecoveryFailed(failed, wait);
    throw RecordsInRetry.of(
        new KafkaException(
            "Record "
                + KafkaUtils.format(failed.record())
                + " held for "
                + wait
                + ": its recovery failed",
            KafkaException.Level.DEBUG,
            failed.failure()),
        held,
        container);
  }

  /** The position of {@code record} in {@code records}, or -1. */
  static int indexOf(List<? extends ConsumerRecord<?, ?>> records, ConsumerRecord<?, ?> record) {
    for (int i = 0; i < records.size(); i++) {
      ConsumerRecord<?, ?> candidate = records.get(i);
      if (candidate.offset() == record.offset()
          && candidate.partition() == record.partition()
          && candidate.topic().equals(record.topic())) {
        return i;
      }
    }
    return -1;
  }

  /**
   * Holds the first record and returns the exception that tells the container not to acknowledge
   * it; logged here once, so the container logs it at DEBUG only.
   */
  private KafkaException hold(
      Exception thrownException,
      List<ConsumerRecord<?, ?>> records,
      Consumer<?, ?> consumer,
      MessageListenerContainer container) {
    Duration wait = holds.hold(records, consumer, container);
    String record = KafkaUtils.format(records.get(0));
    logHold(thrownException, record, wait);
    return new KafkaException(
        "Record " + record + " held for " + wait, KafkaException.Level.DEBUG, thrownException);
  }

  /** What a user reads while a record waits: one line per hold, the stack trace only if unknown. */
  static void logHold(Exception thrownException, String record, Duration wait) {
    Throwable cause = dedupCause(thrownException);
    if (cause instanceof DedupInProgressException) {
      log.info(
          "{} is in progress elsewhere; trying again in {}: {}", record, wait, cause.getMessage());
    } else if (cause instanceof DedupStoreUnavailableException
        && cause.getCause() instanceof CannotCreateTransactionException) {
      // Not the dedup table's outage: Kafka's transaction coordinator may be what failed, and the
      // operator must look there.
      log.warn(
          "{} waits; not committing past it, trying again in {}: {}",
          record,
          wait,
          cause.getMessage());
      log.debug("Transaction not opened for {}", record, thrownException);
    } else if (cause instanceof DedupStoreUnavailableException) {
      log.warn(
          "Dedup store unavailable for {}; not committing past it, trying again in {}: {}",
          record,
          wait,
          cause.getMessage());
      log.debug("Dedup store failure for {}", record, thrownException);
    } else if (cause instanceof DedupExecutorClosedException) {
      // Part of a shutdown whose container stop outlasted its timeout, not a failure: no stack
      // trace, and no retry in this application, which is going away.
      log.warn(
          "{} not handled: consumer-dedup's executor is closed (the application is shutting"
              + " down); not committing past it, it is delivered again after the restart",
          record);
      log.debug("Executor closed before {}", record, thrownException);
    } else {
      log.error(
          "{} cannot be handled now; not committing past it, trying again in {}",
          record,
          wait,
          thrownException);
    }
  }

  private static Throwable dedupCause(Throwable error) {
    Throwable dedup = Causes.first(error, DedupException.class);
    return dedup != null ? dedup : error;
  }

  @Override
  public void handleBatch(
      Exception thrownException,
      ConsumerRecords<?, ?> data,
      Consumer<?, ?> consumer,
      MessageListenerContainer container,
      Runnable invokeListener) {
    handleBatch(thrownException, data, consumer, container, invokeListener, true);
  }

  /**
   * @param firstHandling false when handling the stop of a retry: a delegate that retries in memory
   *     whatever the failure names would stop at the same record again, handled again, without end
   */
  private void handleBatch(
      Exception thrownException,
      ConsumerRecords<?, ?> data,
      Consumer<?, ?> consumer,
      MessageListenerContainer container,
      Runnable invokeListener,
      boolean firstHandling) {
    handleBatchThrough(
        (thrown, retry) -> {
          delegate.handleBatch(thrown, data, consumer, container, retry);
          return data; // unused: handleBatch returns nothing
        },
        thrownException,
        data,
        consumer,
        container,
        invokeListener,
        firstHandling);
  }

  @Override
  public <K, V> ConsumerRecords<K, V> handleBatchAndReturnRemaining(
      Exception thrownException,
      ConsumerRecords<?, ?> data,
      Consumer<?, ?> consumer,
      MessageListenerContainer container,
      Runnable invokeListener) {
    DelegateCall<ConsumerRecords<K, V>> call =
        (thrown, retry) ->
            delegate.handleBatchAndReturnRemaining(thrown, data, consumer, container, retry);
    return handleBatchThrough(
        call, thrownException, data, consumer, container, invokeListener, true);
  }

  /** How the delegate is handed a batch's failure: {@code handleBatch} or its returning twin. */
  @FunctionalInterface
  private interface DelegateCall<R> {
    R handle(Exception thrown, HoldingRetry retry);
  }

  /**
   * Holds or hands over the failed record of a batch, then has the delegate handle the failure
   * through {@code call}, holding a retry of it that stops at a record to retry later.
   *
   * @param firstHandling false when handling the stop of a retry: a delegate that retries in memory
   *     whatever the failure names would stop at the same record again, handled again, without end
   * @return what {@code call} returned, for the failure the delegate handled last
   */
  private <R> R handleBatchThrough(
      DelegateCall<R> call,
      Exception thrownException,
      ConsumerRecords<?, ?> data,
      Consumer<?, ?> consumer,
      MessageListenerContainer container,
      Runnable invokeListener,
      boolean firstHandling) {
    holdOrHandleFailedRecordOfBatch(thrownException, data, consumer, container);
    HoldingRetry retry = new HoldingRetry(invokeListener, data, consumer, container, firstHandling);
    RecoveredRecordLogger.takeFailedRecovery(); // one left by a handling that ended otherwise
    R handled;
    try {
      handled = call.handle(thrownException, retry);
    } catch (RuntimeException e) {
      throwIfRecoveryFailed(listOf(data), consumer, container);
      throw e;
    }
    // A recovery that failed returns its record among the remaining ones, which the container
    // hands to the listener again at once, without a poll: held instead.
    throwIfRecoveryFailed(listOf(data), consumer, container);
    retry.throwIfHeld();
    RuntimeException stopped = retry.stoppedAtRecord();
    if (stopped != null) {
      return handleBatchThrough(call, stopped, data, consumer, container, invokeListener, false);
    }
    return handled;
  }

  /**
   * The listener call a delegate makes to retry a batch in memory (spring-kafka's {@code
   * DefaultErrorHandler} does so for an exception without a record index, through its fallback
   * handler): a retry that stops at a record to retry later holds it, as the first delivery would
   * have been, instead of counting one more failure towards the recoverer, which would discard the
   * batch and let the container commit past the held record. The delegate is told the retry
   * succeeded, so it ends its retries without recovering anything; {@link #throwIfHeld} then keeps
   * the container from acknowledging the batch.
   *
   * <p>A retry that gets as far as a record and stops there (a {@link BatchListenerFailedException}
   * naming a record of the batch: one without a usable key, a conflict, the method's own failure at
   * it) ends the delegate's retries the same way, and the failure is then handled as if the first
   * delivery had stopped there: the records before it committed, it retried or recovered alone, the
   * later ones delivered again. Counted as one more failure of the whole batch, the delegate's
   * recoverer gave up every record of it, those the retry had applied and those after the stop,
   * which the method never saw, and the container committed past them.
   */
  private final class HoldingRetry implements Runnable {
    private final Runnable invokeListener;
    private final ConsumerRecords<?, ?> data;
    private final Consumer<?, ?> consumer;
    private final MessageListenerContainer container;
    private @Nullable RuntimeException held;
    private final boolean endsAtAStop;
    private @Nullable RuntimeException stoppedAtRecord;

    HoldingRetry(
        Runnable invokeListener,
        ConsumerRecords<?, ?> data,
        Consumer<?, ?> consumer,
        MessageListenerContainer container,
        boolean endsAtAStop) {
      this.invokeListener = invokeListener;
      this.endsAtAStop = endsAtAStop;
      this.data = data;
      this.consumer = consumer;
      this.container = container;
    }

    @Override
    public void run() {
      if (held != null || stoppedAtRecord != null) {
        return; // the batch is sought back already; a later call would deliver it out of turn
      }
      try {
        invokeListener.run();
      } catch (RuntimeException e) {
        if (Disposition.of(e) == Disposition.RETRY_LATER) {
          held = holdBatch(e, data, consumer, container);
        } else if (endsAtAStop && BatchFailureIndex.in(e, listOf(data)) >= 0) {
          stoppedAtRecord = e;
        } else {
          throw e;
        }
      }
    }

    /** The failure at a record a retry stopped at, to be handled as a first delivery's; or null. */
    @Nullable RuntimeException stoppedAtRecord() {
      return stoppedAtRecord;
    }

    void throwIfHeld() {
      if (held != null) {
        throw held;
      }
    }
  }

  /**
   * Holds a batch that cannot be handled yet, and hands a failed record of a batch to the delegate
   * itself when the delegate does not seek; both end the handling by throwing.
   */
  private void holdOrHandleFailedRecordOfBatch(
      Exception thrownException,
      ConsumerRecords<?, ?> data,
      Consumer<?, ?> consumer,
      MessageListenerContainer container) {
    if (Disposition.of(thrownException) == Disposition.RETRY_LATER && !data.isEmpty()) {
      throw holdBatch(thrownException, data, consumer, container);
    }
    List<ConsumerRecord<?, ?>> records = listOf(data);
    int index = BatchFailureIndex.in(thrownException, records);
    if (index >= 0) {
      logIfGivenUp(thrownException, records.get(index));
      restartRetriesIfNotRetried(thrownException, records.get(index));
    }
    if (!delegate.seeksAfterHandling() && index >= 0) {
      throw handleFailedRecordOfBatch(thrownException, records, index, consumer, container);
    }
  }

  /**
   * A batch listener stopped at a record to retry later (its index in a {@link
   * BatchListenerFailedException}; the first record without one): commits the records before it, as
   * spring-kafka's {@code DefaultErrorHandler} does, and holds it and those after it.
   */
  private RuntimeException holdBatch(
      Exception thrownException,
      ConsumerRecords<?, ?> data,
      Consumer<?, ?> consumer,
      MessageListenerContainer container) {
    List<ConsumerRecord<?, ?>> records = listOf(data);
    int index = Math.max(0, BatchFailureIndex.in(thrownException, records));
    commitBefore(records, index, consumer, container);
    List<ConsumerRecord<?, ?>> held = records.subList(index, records.size());
    // As for a record: with asyncAcks, any other exception leaves the consumer paused for good.
    return RecordsInRetry.of(hold(thrownException, held, consumer, container), held, container);
  }

  /**
   * A batch listener failed at a record (a {@link BatchListenerFailedException} with its index) and
   * the application's handler does not seek: it gets the failed record alone, as for a record
   * listener, and the records after it come again, none of them being processed (the handler would
   * have the container commit the whole batch).
   */
  private KafkaException handleFailedRecordOfBatch(
      Exception thrownException,
      List<ConsumerRecord<?, ?>> records,
      int index,
      Consumer<?, ?> consumer,
      MessageListenerContainer container) {
    commitBefore(records, index, consumer, container);
    RecoveredRecordLogger.takeFailedRecovery(); // one left by a handling that ended otherwise
    boolean handled = handledByDelegate(thrownException, records.get(index), consumer, container);
    if (!handled) {
      throwIfRecoveryFailed(records, consumer, container);
    }
    int next = handled ? index + 1 : index;
    commitBefore(records, next, consumer, container);
    SeekUtils.doSeeksToBegin(records.subList(next, records.size()), consumer, SEEK_LOG);
    return new KafkaException(
        "Batch sought back to "
            + (next < records.size() ? KafkaUtils.format(records.get(next)) : "its end"),
        KafkaException.Level.DEBUG,
        thrownException);
  }

  private static List<ConsumerRecord<?, ?>> listOf(ConsumerRecords<?, ?> data) {
    List<ConsumerRecord<?, ?>> records = new ArrayList<>(data.count());
    data.forEach(records::add);
    return records;
  }

  /**
   * Commits the records before {@code index}, as spring-kafka's {@code DefaultErrorHandler} does.
   */
  private static void commitBefore(
      List<ConsumerRecord<?, ?>> records,
      int index,
      Consumer<?, ?> consumer,
      MessageListenerContainer container) {
    Map<TopicPartition, OffsetAndMetadata> done = new HashMap<>();
    for (ConsumerRecord<?, ?> record : records.subList(0, index)) {
      done.put(
          new TopicPartition(record.topic(), record.partition()),
          ListenerUtils.createOffsetAndMetadata(container, record.offset() + 1));
    }
    if (done.isEmpty()) {
      return;
    }
    ContainerProperties properties = container.getContainerProperties();
    if (properties.isSyncCommits()) {
      consumer.commitSync(done, properties.getSyncCommitTimeout());
    } else {
      consumer.commitAsync(
          done,
          (offsets, error) -> {
            if (error != null) {
              log.warn("Could not commit {} before a failed record", offsets, error);
            }
          });
    }
  }

  @Override
  public void handleOtherException(
      Exception thrownException,
      Consumer<?, ?> consumer,
      MessageListenerContainer container,
      boolean batchListener) {
    delegate.handleOtherException(thrownException, consumer, container, batchListener);
  }

  @Override
  public boolean deliveryAttemptHeader() {
    return delegate.deliveryAttemptHeader();
  }

  @Override
  public int deliveryAttempt(TopicPartitionOffset topicPartitionOffset) {
    return delegate.deliveryAttempt(topicPartitionOffset);
  }

  @Override
  public void clearThreadState() {
    delegate.clearThreadState();
  }

  @Override
  public boolean isAckAfterHandle() {
    return delegate.isAckAfterHandle();
  }

  @Override
  public void setAckAfterHandle(boolean ack) {
    delegate.setAckAfterHandle(ack);
  }

  @Override
  public void onPartitionsAssigned(
      Consumer<?, ?> consumer, Collection<TopicPartition> partitions, Runnable publishPause) {
    delegate.onPartitionsAssigned(consumer, partitions, publishPause);
  }

  @Override
  public String toString() {
    return "RetryLaterErrorHandler{" + delegate + "}";
  }
}
