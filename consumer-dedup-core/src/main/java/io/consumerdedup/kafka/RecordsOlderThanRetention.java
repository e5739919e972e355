package io.consumerdedup.kafka;

import io.consumerdedup.kafka.internal.RecordSources;
import java.time.Duration;
import java.util.HashSet;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Tells of records applied that were written longer ago than the dedup table keeps a key's SUCCESS:
 * had such a record been applied before, its key may have been purged since, and it was applied
 * again. The table cannot tell, and the topic's retention is the broker's; the record's age against
 * {@code successRetention} is what shows a retention chosen too short (a replay, a new consumer
 * group reading from the start, a topic kept longer than its keys). Used by one loop's thread.
 */
final class RecordsOlderThanRetention {
  private static final Logger log = LoggerFactory.getLogger(DedupPollLoop.class);

  private final Duration successRetention;
  private final String groupId;

  /** Partitions already named at WARN: a replay from the start is told once per partition. */
  private final Set<TopicPartition> told = new HashSet<>();

  private RecordsOlderThanRetention(Duration successRetention, String groupId) {
    this.successRetention = successRetention;
    this.groupId = groupId;
  }

  /** For the processor's records; null if the processor keeps no keys this class knows of. */
  static @Nullable RecordsOlderThanRetention of(RecordProcessor<?, ?> processor, String groupId) {
    return processor instanceof IdempotentRecordHandler<?, ?> handler
        ? new RecordsOlderThanRetention(handler.successRetention(), groupId)
        : null;
  }

  /** The record's handler ran: warns if its key could have been purged before. */
  void applied(ConsumerRecord<?, ?> record, TopicPartition partition) {
    try {
      warnIfOlder(record, partition);
    } catch (RuntimeException | Error e) {
      // Advice only, on a record already applied and its SUCCESS on its way: a logger's failure
      // (an OutOfMemoryError as the line is built) must not hold the record or end the loop.
    }
  }

  private void warnIfOlder(ConsumerRecord<?, ?> record, TopicPartition partition) {
    if (record.timestamp() < 0) {
      return; // a record written without a timestamp
    }
    Duration age = Duration.ofMillis(System.currentTimeMillis() - record.timestamp());
    if (age.compareTo(successRetention) <= 0) {
      return;
    }
    String message =
        "{} was applied, written {} ago: longer ago than the dedup table keeps a key"
            + " (successRetention ({})). Had it been applied before, its key may have been purged"
            + " and it was applied again. Keep successRetention longer than the topic's retention.ms"
            + " and any replay of it";
    if (told.add(partition)) {
      log.warn(
          message + " (told once per partition; the others at DEBUG)",
          RecordSources.describe(record, groupId),
          age,
          successRetention);
    } else {
      log.debug(message, RecordSources.describe(record, groupId), age, successRetention);
    }
  }
}
