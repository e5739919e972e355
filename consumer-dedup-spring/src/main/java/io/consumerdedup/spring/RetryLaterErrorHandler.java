package io.consumerdedup.spring;

import io.consumerdedup.core.DedupInProgressException;
import io.consumerdedup.core.DedupStoreUnavailableException;
import io.consumerdedup.core.Disposition;
import io.consumerdedup.spring.internal.MissingKeyArguments;
import io.consumerdedup.spring.internal.PartitionHolds;
import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Objects;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.common.TopicPartition;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.core.log.LogAccessor;
import org.springframework.kafka.KafkaException;
import org.springframework.kafka.listener.CommonErrorHandler;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.listener.SeekUtils;
import org.springframework.kafka.support.KafkaUtils;
import org.springframework.kafka.support.TopicPartitionOffset;

/**
 * Wraps the application's {@link CommonErrorHandler} so that a record consumer-dedup says to retry
 * later ({@link Disposition#RETRY_LATER}: another consumer holds its key, the dedup store is
 * unreachable, its outcome is not recorded yet) is never recovered or skipped, whatever the
 * application's back-off and recoverer: its partition is sought back to it and paused with a
 * back-off ({@link PartitionHolds}), no delivery attempt is counted, and other partitions keep
 * moving. Every other exception goes to the application's handler unchanged.
 *
 * <p>{@link DedupContainers#configure} installs it on a container; the auto-configuration does so
 * for every listener container.
 */
public final class RetryLaterErrorHandler implements CommonErrorHandler {
  private static final Logger log = LoggerFactory.getLogger(RetryLaterErrorHandler.class);
  private static final LogAccessor SEEK_LOG = new LogAccessor(RetryLaterErrorHandler.class);

  private final CommonErrorHandler delegate;
  private final PartitionHolds holds;
  private final MissingKeyArguments missingKeys;

  public RetryLaterErrorHandler(
      CommonErrorHandler delegate, PartitionHolds holds, MissingKeyArguments missingKeys) {
    this.delegate = Objects.requireNonNull(delegate, "delegate");
    this.holds = Objects.requireNonNull(holds, "holds");
    this.missingKeys = Objects.requireNonNull(missingKeys, "missingKeys");
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
      throw hold(thrownException, records, consumer, container);
    }
    if (delegate.seeksAfterHandling()) {
      delegate.handleRemaining(thrownException, records, consumer, container);
      return;
    }
    // A handler that does not seek expects the container to go on with the records after the
    // failed one; seeking them back has the same effect, since none of them was processed.
    boolean handled = delegate.handleOne(thrownException, records.get(0), consumer, container);
    SeekUtils.doSeeksToBegin(
        handled ? records.subList(1, records.size()) : records, consumer, SEEK_LOG);
    if (!handled) {
      throw new KafkaException(
          "Record not handled by " + delegate, KafkaException.Level.DEBUG, thrownException);
    }
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
    return delegate.handleOne(thrownException, record, consumer, container);
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
    } else if (cause instanceof DedupStoreUnavailableException) {
      log.warn(
          "Dedup store unavailable for {}; not committing past it, trying again in {}: {}",
          record,
          wait,
          cause.getMessage());
      log.debug("Dedup store failure for {}", record, thrownException);
    } else {
      log.error(
          "{} cannot be handled now; not committing past it, trying again in {}",
          record,
          wait,
          thrownException);
    }
  }

  private static Throwable dedupCause(Throwable error) {
    for (Throwable current = error; current != null; current = current.getCause()) {
      if (current instanceof io.consumerdedup.core.DedupException) {
        return current;
      }
    }
    return error;
  }

  @Override
  public void handleBatch(
      Exception thrownException,
      ConsumerRecords<?, ?> data,
      Consumer<?, ?> consumer,
      MessageListenerContainer container,
      Runnable invokeListener) {
    delegate.handleBatch(thrownException, data, consumer, container, invokeListener);
  }

  @Override
  public <K, V> ConsumerRecords<K, V> handleBatchAndReturnRemaining(
      Exception thrownException,
      ConsumerRecords<?, ?> data,
      Consumer<?, ?> consumer,
      MessageListenerContainer container,
      Runnable invokeListener) {
    return delegate.handleBatchAndReturnRemaining(
        thrownException, data, consumer, container, invokeListener);
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
