package io.consumerdedup.kafka;

import io.consumerdedup.kafka.internal.RecordSources;
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.OptionalLong;
import java.util.Set;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.record.TimestampType;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Tells of records applied that were written longer ago than the dedup table keeps a key's SUCCESS:
 * had such a record been applied before, its key may have been purged since, and it was applied
 * again. The table cannot tell, and the topic's retention is the broker's; the record's age against
 * {@code successRetention} is what shows a retention chosen too short (a replay, a new consumer
 * group reading from the start, a topic kept longer than its keys). Used by one loop's thread.
 *
 * <p>A CreateTime is the producer's clock, or an event time it chose: a record just written can say
 * it is a month old, or not written yet. So the loop also notes, per partition, the end the broker
 * reported and when: a record at or past that offset was written since, whatever its timestamp.
 */
final class RecordsOlderThanRetention {
  private static final Logger log = LoggerFactory.getLogger(DedupPollLoop.class);

  /** A CreateTime ahead of this clock by more than this is a producer's clock that is wrong. */
  private static final long FUTURE_TOLERANCE_MILLIS = Duration.ofMinutes(1).toMillis();

  /**
   * Every record of the partition at or past {@code endOffset} was written after {@code atNanos}.
   */
  private record Sighting(long endOffset, long atNanos, @Nullable Sighting earlier) {}

  private final Consumer<?, ?> consumer;
  private final Duration successRetention;
  private final long resightNanos;
  private final String groupId;
  private final Map<TopicPartition, Sighting> sightings = new HashMap<>();

  /** Partitions already named at WARN: a replay from the start is told once per partition. */
  private final Set<TopicPartition> told = new HashSet<>();

  private RecordsOlderThanRetention(
      Consumer<?, ?> consumer, Duration successRetention, String groupId) {
    this.consumer = consumer;
    this.successRetention = successRetention;
    this.resightNanos = Math.max(1, saturatedNanos(successRetention) / 2);
    this.groupId = groupId;
  }

  /** For the processor's records; null if the processor keeps no keys this class knows of. */
  static @Nullable RecordsOlderThanRetention of(
      Consumer<?, ?> consumer, RecordProcessor<?, ?> processor, String groupId) {
    return processor instanceof IdempotentRecordHandler<?, ?> handler
        ? new RecordsOlderThanRetention(consumer, handler.successRetention(), groupId)
        : null;
  }

  /**
   * A poll returned: notes the end of the partitions not noted lately (an empty poll: of those
   * assigned), from the end the last fetch of each carried. Before a partition's first fetch the
   * consumer does not know it, and sends one request for it without waiting (logged at INFO, once
   * per partition as it is assigned); it is noted at a later poll.
   */
  void polled(ConsumerRecords<?, ?> records) {
    try {
      long now = System.nanoTime();
      Collection<TopicPartition> partitions =
          records.isEmpty() ? consumer.assignment() : records.partitions();
      for (TopicPartition partition : partitions) {
        Sighting last = sightings.get(partition);
        if (last != null && now - last.atNanos() < resightNanos) {
          continue;
        }
        OptionalLong lag = consumer.currentLag(partition);
        if (lag.isEmpty()) {
          continue;
        }
        // The end at the last fetch, whose answer came before now: a record at or past it was
        // written after now less the time the fetched records waited in the consumer, a poll's.
        long end = consumer.position(partition, Duration.ZERO) + lag.getAsLong();
        sightings.put(
            partition,
            new Sighting(
                end,
                now,
                last == null ? null : new Sighting(last.endOffset(), last.atNanos(), null)));
      }
    } catch (RuntimeException | Error e) {
      // Advice only: a partition revoked meanwhile, a position not known yet. Its records are
      // judged by their timestamps alone. It runs before the loop's try that seeks back what a stop
      // leaves unreached: an OutOfMemoryError let through here ended the loop with its consumer
      // positioned past the whole poll, which an auto-committing consumer committed as it closed.
    }
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
    if (record.timestampType() == TimestampType.NO_TIMESTAMP_TYPE || record.timestamp() < 0) {
      return; // a record written without a timestamp
    }
    long ageMillis = System.currentTimeMillis() - record.timestamp();
    boolean createTime = record.timestampType() == TimestampType.CREATE_TIME;
    boolean future = createTime && -ageMillis > FUTURE_TOLERANCE_MILLIS;
    if (!future && ageMillis <= successRetention.toMillis()) {
      return;
    }
    if (writtenWithinRetention(record, partition)) {
      return; // written since the loop saw its partition's end: its timestamp is wrong
    }
    String message;
    Object age;
    if (future) {
      message =
          "{} was applied; its CreateTime lies {} in the future (its producer's clock is wrong),"
              + " so how long ago it was written cannot be told. Had it been applied before,"
              + " longer ago than the dedup table keeps a key (successRetention ({})), its key"
              + " may have been purged and it was applied again. Keep successRetention longer than"
              + " the topic's retention.ms and any replay of it, and correct the producer's clock";
      age = Duration.ofMillis(-ageMillis);
    } else {
      message =
          "{} was applied, written {} ago"
              + (createTime ? " by its CreateTime" : "")
              + ": longer ago than the dedup table keeps a key (successRetention ({})). Had it"
              + " been applied before, its key may have been purged and it was applied again."
              + " Keep successRetention longer than the topic's retention.ms and any replay of it";
      age = Duration.ofMillis(ageMillis);
    }
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

  /** Whether the record was written after a sighting of its partition within successRetention. */
  private boolean writtenWithinRetention(ConsumerRecord<?, ?> record, TopicPartition partition) {
    long now = System.nanoTime();
    for (Sighting sighting = sightings.get(partition);
        sighting != null;
        sighting = sighting.earlier()) {
      if (record.offset() >= sighting.endOffset()) {
        return now - sighting.atNanos() <= saturatedNanos(successRetention);
      }
    }
    return false;
  }

  private static long saturatedNanos(Duration duration) {
    try {
      return duration.toNanos();
    } catch (ArithmeticException e) {
      return Long.MAX_VALUE;
    }
  }
}
