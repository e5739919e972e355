package io.consumerdedup.kafka;

import io.consumerdedup.core.DedupInProgressException;
import io.consumerdedup.core.DedupStoreUnavailableException;
import io.consumerdedup.core.internal.FailureTexts;
import io.consumerdedup.kafka.internal.RecordSources;
import java.time.Duration;
import java.util.List;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * How {@link DedupPollLoop} makes a record wait: its partition is sought back to it and paused
 * instead of the thread sleeping, so the consumer keeps polling and stays in its group, and is
 * resumed once the wait is over. A record that cannot be handled yet is held for a back-off that
 * doubles with each hold of its partition in a row. Used by the loop's thread only.
 */
final class PartitionHolds {
  // The loop's logger: applications and tests select the loop's messages by its name.
  private static final Logger log = LoggerFactory.getLogger(DedupPollLoop.class);

  private final Consumer<?, ?> consumer;
  private final PartitionProgress progress;
  private final Duration initialHold;
  private final Duration maxHold;
  private final String groupId;

  PartitionHolds(
      Consumer<?, ?> consumer,
      PartitionProgress progress,
      Duration initialHold,
      Duration maxHold,
      String groupId) {
    this.consumer = consumer;
    this.progress = progress;
    this.initialHold = initialHold;
    this.maxHold = maxHold;
    this.groupId = groupId;
  }

  /** Holds a record that cannot be handled yet: nothing is committed past it. */
  void retryLater(ConsumerRecord<?, ?> record, TopicPartition partition, RuntimeException e) {
    Duration wait = hold(partition, record.offset());
    String described = RecordSources.describe(record, groupId);
    if (e instanceof DedupInProgressException) {
      // Routine while another consumer works on the key: the message says who, no stack trace.
      log.info(
          "{} is in progress elsewhere; trying again in {}: {}", described, wait, e.getMessage());
    } else if (e instanceof DedupStoreUnavailableException) {
      progress.waitingForStore(partition);
      // Once per record and back-off step while the database is away; the cause is at DEBUG.
      log.warn(
          "Dedup store unavailable for {}; not committing past it, trying again in {}: {}",
          described,
          wait,
          e.getMessage());
      log.debug("Dedup store failure for {}", described, FailureTexts.loggable(e));
    } else {
      log.error(
          "{} cannot be handled now; not committing past it, trying again in {}",
          described,
          wait,
          // Such as a handler's own exception around a consumer-dedup one: Logback prints it, and
          // one whose getMessage() throws ended the loop here, the record held but never retried.
          FailureTexts.loggable(e));
    }
  }

  /** Pauses the partition at the offset for the next step of the hold back-off; returns it. */
  Duration hold(TopicPartition partition, long offset) {
    Duration wait = progress.nextHold(partition, initialHold, maxHold);
    pause(partition, offset, wait);
    return wait;
  }

  /** Seeks the partition back to the offset and pauses it for {@code wait}. */
  void pause(TopicPartition partition, long offset, Duration wait) {
    consumer.seek(partition, offset);
    consumer.pause(List.of(partition));
    progress.pausedUntil(partition, offset, System.nanoTime() + wait.toNanos());
  }

  /** Resumes the paused partitions whose wait is over and that are still assigned. */
  void resumeDue() {
    List<TopicPartition> due = progress.dueAt(System.nanoTime());
    if (!due.isEmpty()) {
      List<TopicPartition> assigned = due.stream().filter(consumer.assignment()::contains).toList();
      consumer.resume(assigned);
    }
  }

  /** Polls no longer than until the first paused partition is due, so back-offs stay accurate. */
  Duration pollTimeout(Duration longest) {
    return progress.untilFirstDue(System.nanoTime(), longest);
  }
}
