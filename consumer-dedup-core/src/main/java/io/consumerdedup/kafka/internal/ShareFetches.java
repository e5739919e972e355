package io.consumerdedup.kafka.internal;

import java.util.Collection;
import java.util.HashMap;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;

/**
 * When a record a share consumer's deserializer rejected was fetched, at the latest: its
 * acquisition lock, which cannot be renewed, runs from then. kafka-clients (4.2) returns the
 * records of a partition before a rejected one and keeps the rejection for the next poll, the
 * rejected record and those behind it waiting in its buffer, unrenewable, until the records
 * returned before it are acknowledged. Behind a handler that outlasts the lock, its lock runs out
 * there and the broker delivers it again, perhaps to another consumer of the group, which writes
 * its dead letter; counted from the poll that threw for it, its lock seemed whole, and a second
 * dead letter was written.
 *
 * <p>A rejected record that follows, in its partition, the records the last poll with new records
 * returned is taken as kept behind them, fetched by the time that poll began (or the poll before
 * it, if that one met a rejected record too); any other as fetched by its own poll. A rejected
 * record that is the first of a new fetch of its partition right after such records cannot be told
 * from one kept behind them: counted from that earlier poll, it may be taken for one whose lock ran
 * out and be released once, a delivery spent. A new delivery of the same offset is counted from its
 * own poll, so this happens once a fetch, never again and again.
 *
 * <p>Used by the thread that polls the consumer only.
 */
public final class ShareFetches {
  /** The last offset returned, or rejected since, of each partition of the last new records. */
  private final Map<TopicPartition, Long> returnedUpTo = new HashMap<>();

  private long returnedByNanos;
  private long pollStartNanos;
  private boolean rejectedInPoll;

  /**
   * Whether a record was rejected since the last poll with new records: the records returned next
   * may come from the same fetch as it.
   */
  private boolean afterRejection;

  /** A poll begins, at {@code nowNanos} ({@link System#nanoTime()}). */
  public void pollStarts(long nowNanos) {
    pollStartNanos = nowNanos;
    rejectedInPoll = false;
  }

  /**
   * What the poll returned, {@code polled} records in all, of which {@code fresh} new to this
   * consumer (not renewed records handed back); ignored if it met a rejected record. None at all:
   * kafka-clients' buffer is empty.
   */
  public void returned(Collection<? extends ConsumerRecord<?, ?>> fresh, int polled) {
    if (rejectedInPoll) {
      return; // noted by rejected
    }
    if (polled == 0) {
      returnedUpTo.clear();
      afterRejection = false;
      return;
    }
    if (fresh.isEmpty()) {
      return;
    }
    if (!afterRejection) {
      returnedUpTo.clear();
      returnedByNanos = pollStartNanos;
    }
    afterRejection = false;
    for (ConsumerRecord<?, ?> record : fresh) {
      returnedUpTo.merge(partition(record), record.offset(), Math::max);
    }
  }

  /**
   * The poll under way met the record at {@code offset} of {@code partition}, which the
   * deserializer rejected: when it was fetched, at the latest ({@link System#nanoTime()}).
   */
  public long rejected(TopicPartition partition, long offset) {
    rejectedInPoll = true;
    afterRejection = true;
    Long upTo = returnedUpTo.get(partition);
    if (upTo != null && upTo < offset) {
      returnedUpTo.put(partition, offset); // one rejected behind it is of that fetch too
      return returnedByNanos;
    }
    returnedUpTo.clear();
    returnedUpTo.put(partition, offset);
    returnedByNanos = pollStartNanos;
    return pollStartNanos;
  }

  private static TopicPartition partition(ConsumerRecord<?, ?> record) {
    return new TopicPartition(record.topic(), record.partition());
  }
}
