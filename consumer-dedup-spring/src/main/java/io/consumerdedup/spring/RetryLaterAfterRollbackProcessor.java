package io.consumerdedup.spring;

import io.consumerdedup.core.DedupStoreUnavailableException;
import io.consumerdedup.core.Disposition;
import io.consumerdedup.core.internal.FailureTexts;
import io.consumerdedup.spring.internal.AfterRollbackErrorHandler;
import io.consumerdedup.spring.internal.ContainerPartitionHolds;
import io.consumerdedup.spring.internal.ListenerOutcomes;
import io.consumerdedup.spring.internal.MissingKeyArguments;
import io.consumerdedup.spring.internal.RecoveredRecordLogger;
import io.consumerdedup.spring.internal.RecoveredRecordLogger.FailedRecovery;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.springframework.kafka.listener.AfterRollbackProcessor;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.support.KafkaUtils;
import org.springframework.transaction.CannotCreateTransactionException;

/**
 * Wraps the container's {@link AfterRollbackProcessor}, which spring-kafka calls when the
 * transaction a record was processed in rolls back (a listener that threw, or a commit that failed
 * after the listener returned: a transaction that outlived {@code transaction.timeout.ms}, a broker
 * timeout):
 *
 * <ul>
 *   <li>it tells consumer-dedup of the rollback first, so the record's claim is recorded FAILED,
 *       never SUCCESS, and the redelivery runs the listener again;
 *   <li>a record consumer-dedup says to retry later ({@link Disposition#RETRY_LATER}) is held like
 *       {@link RetryLaterErrorHandler} holds it, instead of counting towards the processor's
 *       recovery (which would skip it), and so is a record whose transaction the container could
 *       not open (the database down, Kafka's transaction coordinator unavailable);
 *   <li>everything else goes to the application's processor unchanged.
 * </ul>
 */
public final class RetryLaterAfterRollbackProcessor<K, V> implements AfterRollbackProcessor<K, V> {
  private final AfterRollbackProcessor<K, V> delegate;
  private final ContainerPartitionHolds holds;
  private final MissingKeyArguments missingKeys;

  public RetryLaterAfterRollbackProcessor(
      AfterRollbackProcessor<K, V> delegate,
      ContainerPartitionHolds holds,
      MissingKeyArguments missingKeys) {
    this.delegate = Objects.requireNonNull(delegate, "delegate");
    this.holds = Objects.requireNonNull(holds, "holds");
    this.missingKeys = Objects.requireNonNull(missingKeys, "missingKeys");
  }

  /** The application's processor, which receives every rollback that is not held. */
  public AfterRollbackProcessor<K, V> delegate() {
    return delegate;
  }

  @Override
  public void process(
      List<ConsumerRecord<K, V>> records,
      Consumer<K, V> consumer,
      MessageListenerContainer container,
      Exception thrown,
      boolean recoverable,
      ContainerProperties.EOSMode eosMode) {
    if (records.isEmpty()) {
      delegate.process(records, consumer, container, thrown, recoverable, eosMode);
      return;
    }
    Exception exception =
        notOpened(
            missingKeys.translate(
                AfterRollbackErrorHandler.failure(thrown), records.get(0), container.getGroupId()));
    ListenerOutcomes.rolledBack(records.get(0), exception);
    if (Disposition.of(exception) == Disposition.RETRY_LATER) {
      Duration wait = holds.hold(records, consumer, container);
      RetryLaterErrorHandler.logHold(exception, KafkaUtils.format(records.get(0)), wait);
      return;
    }
    RecoveredRecordLogger.takeFailedRecovery(); // one left by a handling that ended otherwise
    try {
      delegate.process(records, consumer, container, exception, recoverable, eosMode);
    } finally {
      holdIfRecoveryFailed(records, consumer, container);
    }
  }

  /**
   * The container's own transaction could not be opened (spring-kafka passes that on as it came;
   * what the listener throws comes wrapped in a {@code ListenerExecutionFailedException}): the
   * database of a database transaction manager is down, or no pool connection came in time; or
   * Kafka's transaction manager could not begin its transaction (the producer's {@code
   * initTransactions} failed: the transaction coordinator unavailable or timing out, the
   * transactional id refused). The record was never handed to the listener. Passed on as it came,
   * it spent the processor's tries (ten without back-off, by default) within seconds, and the
   * record was skipped, never applied; it waits as in an outage of the dedup table instead.
   */
  private static Exception notOpened(Exception exception) {
    if (!(exception instanceof CannotCreateTransactionException)) {
      return exception;
    }
    return new DedupStoreUnavailableException(
        "The container's transaction could not be opened: "
            + FailureTexts.describe(exception)
            + "; the record waits until it can",
        null,
        null,
        exception);
  }

  @Override
  public void processBatch(
      ConsumerRecords<K, V> records,
      List<ConsumerRecord<K, V>> recordList,
      Consumer<K, V> consumer,
      MessageListenerContainer container,
      Exception thrown,
      boolean recoverable,
      ContainerProperties.EOSMode eosMode) {
    Exception exception = AfterRollbackErrorHandler.failure(thrown);
    ListenerOutcomes.batchRolledBack(exception);
    if (!recordList.isEmpty() && Disposition.of(exception) == Disposition.RETRY_LATER) {
      // The whole batch rolled back: it waits from its first record, without counting attempts.
      Duration wait = holds.hold(recordList, consumer, container);
      RetryLaterErrorHandler.logHold(exception, KafkaUtils.format(recordList.get(0)), wait);
      return;
    }
    RecoveredRecordLogger.takeFailedRecovery(); // one left by a handling that ended otherwise
    try {
      delegate.processBatch(
          records, recordList, consumer, container, exception, recoverable, eosMode);
    } finally {
      holdIfRecoveryFailed(recordList, consumer, container);
    }
  }

  /**
   * Holds the records if the processor's recovery failed in the handling that just ended (a {@code
   * DeadLetterPublishingRecoverer} whose dead-letter topic refuses the record: too large for it,
   * not authorised, its broker down), as {@link RetryLaterErrorHandler} does without Kafka
   * transactions. The processor sought them back and forgot the record's failures, so the container
   * took it again at once, its recovery failing again, several ERROR lines a time, for as long as
   * the recoverer failed. None of the records was processed (the recovered one is the first, or the
   * first of a batch recovered whole): they wait from the first with the back-off of a record to
   * retry later, the failure logged at ERROR once per streak.
   */
  private void holdIfRecoveryFailed(
      List<ConsumerRecord<K, V>> records,
      Consumer<K, V> consumer,
      MessageListenerContainer container) {
    FailedRecovery failed = RecoveredRecordLogger.takeFailedRecovery();
    if (failed == null) {
      return;
    }
    if (RetryLaterErrorHandler.indexOf(records, failed.record()) < 0) {
      // Not a record in hand: nothing to hold, but the failure is still the user's to read.
      RecoveredRecordLogger.logRecoveryFailed(failed, null);
      return;
    }
    Duration wait = holds.hold(records, consumer, container);
    RecoveredRecordLogger.logRecoveryFailed(failed, wait);
  }

  @Override
  public void clearThreadState() {
    delegate.clearThreadState();
  }

  @Override
  public boolean isProcessInTransaction() {
    return delegate.isProcessInTransaction();
  }

  @Override
  public String toString() {
    return "RetryLaterAfterRollbackProcessor{" + delegate + "}";
  }
}
