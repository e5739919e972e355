package io.consumerdedup.kafka;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.common.TopicPartition;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The two ends of one poll in {@link DedupPollLoop}: before its records are handled, the processor
 * {@link RecordProcessor#prepare prepares} them together (an {@link IdempotentRecordHandler} claims
 * their keys in one round trip); after, it {@link RecordProcessor#settle settles} them, and a
 * record whose outcome is not recorded yet holds its partition, so that nothing is committed past
 * it. Used by the loop's thread only.
 */
final class PollClaims<K, V> {
  // The loop's logger: applications and tests select the loop's messages by its name.
  private static final Logger log = LoggerFactory.getLogger(DedupPollLoop.class);

  private final RecordProcessor<K, V> processor;
  private final PartitionProgress progress;
  private final PartitionHolds holds;

  PollClaims(RecordProcessor<K, V> processor, PartitionProgress progress, PartitionHolds holds) {
    this.processor = processor;
    this.progress = progress;
    this.holds = holds;
  }

  /** Lets the processor prepare the poll's records, in the order the loop handles them. */
  void prepare(ConsumerRecords<K, V> records) {
    if (records.isEmpty()) {
      return;
    }
    List<ConsumerRecord<K, V>> polled = new ArrayList<>(records.count());
    records.partitions().forEach(partition -> polled.addAll(records.records(partition)));
    try {
      processor.prepare(polled);
    } catch (RuntimeException e) {
      // Preparing is an optimisation: each record is still processed, and fails on its own.
      log.warn(
          "Could not prepare {} records together; processing them one by one", polled.size(), e);
    }
  }

  /**
   * Holds each partition at its first record whose outcome is not recorded yet: nothing is
   * committed past it, and it comes again (a duplicate then, once the outcome is written).
   */
  void settle(ConsumerRecords<K, V> records) {
    List<ConsumerRecord<K, V>> unrecorded;
    try {
      unrecorded = processor.settle();
    } catch (RuntimeException e) {
      // Which outcomes are recorded is unknown: the whole poll comes again (those recorded as
      // duplicates), rather than the loop moving on past records whose outcome may be lost.
      log.error("Could not settle the poll's records; delivering them again", e);
      unrecorded = new ArrayList<>();
      for (TopicPartition partition : records.partitions()) {
        unrecorded.add(records.records(partition).get(0));
      }
    }
    Map<TopicPartition, Long> first = new HashMap<>();
    for (ConsumerRecord<K, V> record : unrecorded) {
      first.merge(
          new TopicPartition(record.topic(), record.partition()), record.offset(), Math::min);
    }
    first.forEach(
        (partition, offset) -> {
          progress.undone(partition, offset);
          progress.waitingForStore(partition);
          Duration wait = holds.hold(partition, offset);
          log.warn(
              "The outcome of {}@{} is not recorded yet; not committing past it, delivering it"
                  + " again in {}",
              partition,
              offset,
              wait);
        });
  }
}
