package io.consumerdedup.spring;

import io.consumerdedup.kafka.DedupPollLoop;
import io.consumerdedup.spring.internal.AfterRollbackErrorHandler;
import io.consumerdedup.spring.internal.ComposedErrorHandlers;
import io.consumerdedup.spring.internal.ContainerPartitionHolds;
import io.consumerdedup.spring.internal.ContainerTransactions;
import io.consumerdedup.spring.internal.CurrentBatch;
import io.consumerdedup.spring.internal.CurrentRecordInterceptor;
import io.consumerdedup.spring.internal.GuardedRecordInterceptor;
import io.consumerdedup.spring.internal.MissingKeyArguments;
import io.consumerdedup.spring.internal.RecoveredRecordLogger;
import java.time.Duration;
import java.util.Set;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.kafka.listener.AbstractMessageListenerContainer;
import org.springframework.kafka.listener.AfterRollbackProcessor;
import org.springframework.kafka.listener.CommonErrorHandler;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.FailedRecordProcessor;
import org.springframework.kafka.listener.RecordInterceptor;
import org.springframework.kafka.listener.adapter.KafkaBackoffAwareMessageListenerAdapter;

/**
 * Prepares a listener container for consumer-dedup, composing with what it already has (nothing is
 * replaced):
 *
 * <ul>
 *   <li>{@link CurrentRecordInterceptor} after the container's own record interceptor, so {@link
 *       Idempotent} listeners see the record, settle their outcome after the container's
 *       transaction, and never leave a claim open; and {@link CurrentBatch} after its batch
 *       interceptor, so batch listeners taking messages see their records;
 *   <li>{@link RetryLaterErrorHandler} around the container's error handler (a plain {@code
 *       DefaultErrorHandler} when it has none and no transaction manager), so a record whose key is
 *       held elsewhere or whose store is unreachable waits instead of being recovered; a container
 *       with a transaction manager (Kafka's from Spring Boot's {@code transaction-id-prefix}
 *       included) and no error handler keeps its failures going to its after-rollback processor, as
 *       spring-kafka has it;
 *   <li>{@link RetryLaterAfterRollbackProcessor} around its after-rollback processor, so a
 *       transaction that rolls back leaves the key retryable;
 *   <li>consumer-dedup's "dead-letter now" exceptions as not retryable in a {@code
 *       DefaultErrorHandler}, also one inside spring-kafka's {@code CommonDelegatingErrorHandler}
 *       or {@code CommonMixedErrorHandler} ({@link DedupErrorClassification});
 *   <li>a retry listener after those of a {@code DefaultErrorHandler} or {@code
 *       DefaultAfterRollbackProcessor}, which logs at ERROR each record it gives up on ({@link
 *       RecoveredRecordLogger}), and hears of each recovery that fails, so that the wrappers above
 *       hold that record with their back-off; with another error handler, {@link
 *       RetryLaterErrorHandler} logs the records consumer-dedup says not to retry as it hands them
 *       over;
 *   <li>{@link DedupConsumerPostProcessor} on its {@code DefaultKafkaConsumerFactory}, so that its
 *       {@code Idempotent} record listeners claim each poll's keys together and no offset commit
 *       passes a record whose SUCCESS is not durable (shared by every container of the factory).
 * </ul>
 *
 * The auto-configuration does this for every container of the application context before it starts.
 * Call it yourself for a container built by hand or registered after start-up, before starting it.
 * Calling it twice changes nothing.
 */
public final class DedupContainers {
  private static final Logger log = LoggerFactory.getLogger(DedupContainers.class);

  private DedupContainers() {}

  /**
   * Prepares {@code container} with the default hold back-off ({@link
   * DedupPollLoop#DEFAULT_HOLD_BACKOFF} doubling to {@link
   * DedupPollLoop#DEFAULT_MAX_HOLD_BACKOFF}).
   */
  public static void configure(AbstractMessageListenerContainer<?, ?> container) {
    configure(
        container,
        DedupPollLoop.DEFAULT_HOLD_BACKOFF,
        DedupPollLoop.DEFAULT_MAX_HOLD_BACKOFF,
        Set.of());
  }

  /**
   * Prepares {@code container}; a held record's partition is paused for {@code initialHoldBackOff},
   * doubling on each consecutive hold of the same record up to {@code maxHoldBackOff}.
   *
   * @param keyHeaderArguments key headers that the {@code @Idempotent} listeners of this container
   *     are keyed by and also take as {@code @Header} arguments: a record without one is refused as
   *     a missing key, once, although it fails before the listener is called. Give them only for a
   *     container whose listeners are all keyed so: any listener of it missing such an argument is
   *     refused this way
   * @throws IllegalStateException the container is running
   */
  public static void configure(
      AbstractMessageListenerContainer<?, ?> container,
      Duration initialHoldBackOff,
      Duration maxHoldBackOff,
      Set<String> keyHeaderArguments) {
    configure(
        container,
        initialHoldBackOff,
        maxHoldBackOff,
        new MissingKeyArguments(keyHeaderArguments),
        true);
  }

  /**
   * Prepares {@code container} as {@link #configure(AbstractMessageListenerContainer, Duration,
   * Duration, Set)}, with missing key header arguments recognised per listener method ({@link
   * IdempotentListenerPostProcessor#configure}). Not public: {@link MissingKeyArguments} is
   * internal.
   *
   * @param claimsPerPoll whether to add {@link DedupConsumerPostProcessor} to the container's
   *     consumer factory ({@code consumer-dedup.claims-per-poll})
   */
  @SuppressWarnings({"unchecked", "rawtypes"})
  static void configure(
      AbstractMessageListenerContainer<?, ?> container,
      Duration initialHoldBackOff,
      Duration maxHoldBackOff,
      MissingKeyArguments missingKeys,
      boolean claimsPerPoll) {
    if (container.isRunning()) {
      throw new IllegalStateException(
          "Configure listener container " + container.getListenerId() + " before starting it");
    }
    ContainerPartitionHolds holds = new ContainerPartitionHolds(initialHoldBackOff, maxHoldBackOff);
    AbstractMessageListenerContainer raw = container;
    ContainerProperties properties = container.getContainerProperties();
    if (ContainerTransactions.kafka(properties) && !properties.isStopContainerWhenFenced()) {
      log.warn(
          "Listener container {} runs in Kafka transactions without stopContainerWhenFenced: when a"
              + " transaction outlives transaction.timeout.ms, Kafka reports a fenced producer and"
              + " spring-kafka goes on past the record (KAFKA-9803). consumer-dedup records its"
              + " key FAILED, but only a redelivery applies it: call"
              + " getContainerProperties().setStopContainerWhenFenced(true), and keep"
              + " transaction.timeout.ms longer than a listener call",
          container.getListenerId());
    }

    boolean consumersWrapped = claimsPerPoll && preparePollClaims(container, properties);
    if (!consumersWrapped) {
      warnOfOffsetsCommittedInsideTransactions(container, properties);
    }

    RecordInterceptor existing = raw.getRecordInterceptor();
    if (!GuardedRecordInterceptor.contains(existing, CurrentRecordInterceptor.class)) {
      CurrentRecordInterceptor current =
          CurrentRecordInterceptor.of(
              container, () -> DedupConsumerPostProcessor.autoCommits(container));
      raw.setRecordInterceptor(
          existing == null ? current : new GuardedRecordInterceptor(existing, current));
    }

    // For batch listeners taking List<Message<?>>, and for the end of a batch's Kafka transaction
    // that the methods a batch listener calls wait for: composed after the application's own.
    raw.setBatchInterceptor(CurrentBatch.after(raw.getBatchInterceptor(), properties));

    // In a @RetryableTopic chain the recoverer forwards a failing record to the next topic. Every
    // container of the chain runs its listener through the back-off aware adapter.
    boolean retryTopicChain =
        properties.getMessageListener() instanceof KafkaBackoffAwareMessageListenerAdapter<?, ?>
            || container.getMainListenerId() != null;
    CommonErrorHandler errorHandler = raw.getCommonErrorHandler();
    if (errorHandler == null && ContainerTransactions.any(properties)) {
      // spring-kafka makes none for a container with transactions (Kafka's from Spring Boot's
      // transaction-id-prefix included): its failures go to the after-rollback processor, which
      // a DefaultErrorHandler retrying and recovering inside the transaction never let see them.
      raw.setCommonErrorHandler(new AfterRollbackErrorHandler());
    } else if (!(errorHandler instanceof RetryLaterErrorHandler)
        && !(errorHandler instanceof AfterRollbackErrorHandler)) {
      if (errorHandler == null) {
        // What the container would make for itself, but with consumer-dedup's classifications.
        errorHandler = new DefaultErrorHandler();
      }
      // Inside spring-kafka's composite handlers too: the one that handles the failure.
      for (CommonErrorHandler handler : ComposedErrorHandlers.of(errorHandler)) {
        if (handler instanceof DefaultErrorHandler defaultErrorHandler) {
          DedupErrorClassification.applyTo(defaultErrorHandler);
        }
        if (handler instanceof FailedRecordProcessor processor) {
          RecoveredRecordLogger.addTo(processor, retryTopicChain);
        }
      }
      raw.setCommonErrorHandler(new RetryLaterErrorHandler(errorHandler, holds, missingKeys));
    }

    AfterRollbackProcessor rollbackProcessor = raw.getAfterRollbackProcessor();
    if (!(rollbackProcessor instanceof RetryLaterAfterRollbackProcessor)) {
      if (rollbackProcessor instanceof FailedRecordProcessor failedRecordProcessor) {
        DedupErrorClassification.applyTo(failedRecordProcessor);
        RecoveredRecordLogger.addTo(failedRecordProcessor, retryTopicChain);
      }
      raw.setAfterRollbackProcessor(
          new RetryLaterAfterRollbackProcessor(rollbackProcessor, holds, missingKeys));
    }
  }

  /**
   * A container with a database transaction manager commits a record's offset whatever the outcome
   * of the record's transaction: inside it, before the database commit, under ack mode {@code
   * RECORD} (and an {@code acknowledge()} under {@code MANUAL_IMMEDIATE}); queued inside it and
   * committed after the poll, even when it rolled back, under the other ack modes. The consumers
   * consumer-dedup wraps hold such commits back until the transaction has committed, or the record
   * is passed ({@link io.consumerdedup.spring.internal.PollAwareConsumer}). Said at start-up for a
   * container whose consumers are not wrapped, in every ack mode.
   */
  private static void warnOfOffsetsCommittedInsideTransactions(
      AbstractMessageListenerContainer<?, ?> container, ContainerProperties properties) {
    if (!ContainerTransactions.any(properties) || ContainerTransactions.kafka(properties)) {
      return;
    }
    log.warn(
        "Listener container {} runs each record in a database transaction with ack mode {}:"
            + " spring-kafka commits the record's offset whatever that transaction's outcome"
            + " (before it commits, or after the poll even when it rolled back), so a crash, a"
            + " stop or a failed commit in between loses the record. consumer-dedup holds such"
            + " commits back only through the consumers it wraps: keep"
            + " consumer-dedup.claims-per-poll true and a DefaultKafkaConsumerFactory",
        container.getListenerId(),
        properties.getAckMode());
  }

  /**
   * Adds {@link DedupConsumerPostProcessor} to the container's consumer factory; says at start-up
   * where record listeners claim one record at a time anyway.
   *
   * @return whether the container's consumers are wrapped
   */
  private static boolean preparePollClaims(
      AbstractMessageListenerContainer<?, ?> container, ContainerProperties properties) {
    String notAdded = DedupConsumerPostProcessor.addTo(container);
    if (notAdded != null) {
      log.info(
          "@Idempotent record listeners of container {} claim one record at a time: {}, not a"
              + " DefaultKafkaConsumerFactory, whose consumers consumer-dedup would wrap to claim"
              + " a poll's keys together",
          container.getListenerId(),
          notAdded);
      return false;
    }
    if (ContainerTransactions.kafka(properties)) {
      log.info(
          "@Idempotent record listeners of container {} claim one record at a time: it runs in"
              + " Kafka transactions, whose offsets are committed with the producer's transaction,"
              + " which consumer-dedup cannot hold back until SUCCESS marks written in the"
              + " background are durable",
          container.getListenerId());
    }
    return true;
  }
}
