package io.consumerdedup.kafka;

import io.consumerdedup.core.internal.FailureTexts;
import io.consumerdedup.kafka.internal.LostLines;
import io.consumerdedup.kafka.internal.RecordSources;
import io.consumerdedup.kafka.internal.UndeserializableRecords;
import java.time.Duration;
import java.util.OptionalInt;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RecordDeserializationException;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * How {@link DedupPollLoop} gives up on a record: a failing handler is retried after the retry
 * back-off until the record's attempts are spent, then the record goes to the {@link
 * DeadLetterHandler}, as does at once a record that can never be handled (typed) or cannot be
 * deserialized (its raw bytes). The loop moves past a record only once its dead letter is written;
 * if the handler throws, the partition is held at the record, which is dead-lettered again later.
 * Used by the loop's thread only.
 */
final class DeadLettering<K, V> {
  // The loop's logger: applications and tests select the loop's messages by its name.
  private static final Logger log = LoggerFactory.getLogger(DedupPollLoop.class);

  private final Consumer<K, V> consumer;
  private final DeadLetterHandler<K, V> handler;
  private final RecordProcessor<K, V> processor;
  private final PartitionProgress progress;
  private final PartitionHolds holds;
  private final int maxAttempts;
  private final Duration retryBackOff;
  private final String groupId;

  DeadLettering(
      Consumer<K, V> consumer,
      DeadLetterHandler<K, V> handler,
      RecordProcessor<K, V> processor,
      PartitionProgress progress,
      PartitionHolds holds,
      int maxAttempts,
      Duration retryBackOff,
      String groupId) {
    this.consumer = consumer;
    this.handler = handler;
    this.processor = processor;
    this.progress = progress;
    this.holds = holds;
    this.maxAttempts = maxAttempts;
    this.retryBackOff = retryBackOff;
    this.groupId = groupId;
  }

  /** True if the record failed its last allowed attempt earlier, and waits for its dead letter. */
  boolean attemptsSpent(PartitionProgress.Failure previous) {
    return previous.attempts() >= maxAttempts;
  }

  /** Dead-letters a record no redelivery can help; true if done, false if held at it. */
  boolean notRetryable(ConsumerRecord<K, V> record, TopicPartition partition, RuntimeException e) {
    log.error(
        "{} cannot be handled (not retryable); dead-lettering it",
        describe(record),
        FailureTexts.loggable(e));
    return deadLetter(record, partition, e);
  }

  /**
   * Counts the failed attempt, by the loop and by the processor ({@link RecordProcessor#attempts}),
   * and dead-letters the record once its attempts are spent; until then seeks back to it and pauses
   * the partition for the retry back-off.
   *
   * @return true if the record was dead-lettered; false if its partition is held at it
   */
  boolean handlerFailed(
      ConsumerRecord<K, V> record,
      TopicPartition partition,
      PartitionProgress.@Nullable Failure previous,
      RuntimeException e) {
    int counted = previous == null ? 1 : previous.attempts() + 1;
    OptionalInt stored = storedAttempts(record);
    int attempts = Math.max(counted, stored.orElse(0));
    String countedBy =
        attempts > counted
            ? "as counted " + storedBy() + "; this loop's count is " + counted
            : "as counted by this loop";
    progress.failed(partition, new PartitionProgress.Failure(record.offset(), attempts, e));
    if (attempts >= maxAttempts) {
      log.error(
          "Handler failed for {} on attempt {} of {} ({}); dead-lettering it",
          describe(record),
          attempts,
          maxAttempts,
          countedBy,
          FailureTexts.loggable(e));
      return deadLetter(record, partition, e);
    }
    // One line per attempt that will be retried; the stack trace once, when the record is given up.
    log.warn(
        "Handler failed for {} on attempt {} of {} ({}); retrying in {}: {}",
        describe(record),
        attempts,
        maxAttempts,
        countedBy,
        retryBackOff,
        // An exception whose toString() throws must not end the loop on its first attempt.
        FailureTexts.describe(e));
    log.debug(
        "Stack trace of the failed attempt of {}", describe(record), FailureTexts.loggable(e));
    holds.pause(partition, record.offset(), retryBackOff);
    return false;
  }

  /** The processor's count of the record's attempts, which outlives this loop; empty if none. */
  private OptionalInt storedAttempts(ConsumerRecord<K, V> record) {
    try {
      return processor.attempts(record);
    } catch (RuntimeException e) {
      // The failure is recorded already; a count from memory only risks extra attempts, while
      // holding the record for the count would stop the partition on a database outage.
      log.warn(
          "Could not read how often {} was attempted; counting this loop's attempts only",
          describe(record),
          FailureTexts.loggable(e));
      return OptionalInt.empty();
    }
  }

  /**
   * Where the processor's count of attempts comes from, for the log: an operator deciding whether a
   * restart grants the record its attempts again reads it there.
   */
  private String storedBy() {
    if (processor instanceof JdbcTransactionalProcessor) {
      // Its failed attempts rolled back with their dedup rows: counted nowhere but in memory.
      return "in memory by JdbcTransactionalProcessor, since the process started (a restart"
          + " forgets it)";
    }
    if (processor instanceof IdempotentRecordHandler) {
      return "by the dedup table, across restarts";
    }
    return "by the processor's attempts()";
  }

  /** Dead-letters the record; true if done, false if its partition is held at it. */
  boolean deadLetter(ConsumerRecord<K, V> record, TopicPartition partition, Exception why) {
    if (!deadLetter(
        record,
        partition,
        () -> KafkaDeadLetterPublisher.deadLetterFor(handler, groupId, record, why))) {
      return false;
    }
    if (processor instanceof JdbcTransactionalProcessor<K, V> transactional) {
      // Only once written: until then its count is what keeps the record out of the poll's
      // transaction, where its handler would run again though its attempts are spent.
      forgetFailures(transactional, record);
    }
    return true;
  }

  /**
   * Lets the processor drop its count of the record's failures, so that a replay of the record (the
   * group rewound) gets its attempts again.
   */
  private void forgetFailures(
      JdbcTransactionalProcessor<K, V> transactional, ConsumerRecord<K, V> record) {
    try {
      transactional.givenUp(record);
    } catch (RuntimeException | Error e) {
      // The dead letter is written: thrown, an OutOfMemoryError here ended the loop before the
      // record was counted done, and the next loop dead-lettered it again. A count left behind
      // only shortens the attempts of a replay. The line may throw under the same
      // OutOfMemoryError, hence LostLines.
      LostLines.warn(log, "Could not forget the failed attempts of {}", record, groupId, e);
    }
  }

  /**
   * Dead-letters a record the consumer could not deserialize; once that is done, moves its
   * partition past it and counts it as done.
   */
  void undeserializable(RecordDeserializationException e) {
    TopicPartition partition = e.topicPartition();
    ConsumerRecord<byte[], byte[]> raw = UndeserializableRecords.raw(e);
    if (!consumer.assignment().contains(partition)) {
      // Revoked during the poll: the partition's new owner meets the record.
      log.info("{} cannot be deserialized, but is no longer assigned here", describe(raw));
      return;
    }
    if (progress.isPaused(partition)) {
      // Held at an earlier record whose SUCCESS is not written, and sought back to it: this record
      // comes again after it, and is dead-lettered then.
      log.info(
          "{} cannot be deserialized; dead-lettering it once the records before it are done",
          describe(raw));
      return;
    }
    log.error(
        "{} cannot be deserialized (its {} was rejected); dead-lettering it",
        describe(raw),
        UndeserializableRecords.rejectedPart(e).orElse("key or value"),
        // Its cause is the deserializer's exception, which Logback prints: one whose message
        // throws ended the loop here, before the dead letter, at every restart.
        FailureTexts.loggable(e));
    if (deadLetter(
        raw,
        partition,
        () -> KafkaDeadLetterPublisher.deadLetterUndeserializableFor(handler, groupId, raw, e))) {
      consumer.seek(partition, e.offset() + 1);
      progress.done(partition, e.offset() + 1);
    }
  }

  /**
   * Runs {@code send}, which dead-letters the record; true if it returned. If it threw, the
   * partition is held at the record, so a record is never passed without its dead letter. An {@code
   * Error} it throws (an {@code OutOfMemoryError} as a large record is copied, a serializer's
   * {@code StackOverflowError}) is a dead letter not written like any other: ending the loop on it,
   * every loop the application started again met the record first, and none of its partitions was
   * consumed meanwhile.
   */
  private boolean deadLetter(ConsumerRecord<?, ?> record, TopicPartition partition, Runnable send) {
    try {
      send.run();
    } catch (RuntimeException | Error e) {
      Duration wait = holds.hold(partition, record.offset());
      log.error(
          "Could not dead-letter {}; not committing past it, trying again in {}",
          describe(record),
          wait,
          // What the application's DeadLetterHandler threw: its printing must not end the loop.
          FailureTexts.loggable(e));
      return false;
    }
    progress.settled(partition);
    return true;
  }

  private String describe(ConsumerRecord<?, ?> record) {
    return RecordSources.describe(record, groupId);
  }
}
