package io.consumerdedup.kafka;

import io.consumerdedup.core.internal.Durations;
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.jspecify.annotations.Nullable;

/**
 * What {@link DedupPollLoop} remembers per partition between polls: the offset to commit, when a
 * paused partition is due again, how often its next record was held in a row, and the failures of
 * that record. Used by the loop's thread only (rebalance callbacks run inside its poll).
 */
final class PartitionProgress {

  /** The handler failures of the record at {@code offset}, the partition's next record. */
  record Failure(long offset, int attempts, RuntimeException last) {}

  private final Map<TopicPartition, OffsetAndMetadata> done = new HashMap<>();
  private final Map<TopicPartition, Long> resumeAtNanos = new HashMap<>();
  private final Map<TopicPartition, Long> heldAt = new HashMap<>();
  private final Map<TopicPartition, Integer> consecutiveHolds = new HashMap<>();
  private final Map<TopicPartition, Failure> failures = new HashMap<>();
  private final Set<TopicPartition> waitingForStore = new HashSet<>();

  /** Every record of {@code partition} before {@code nextOffset} is done. */
  void done(TopicPartition partition, long nextOffset) {
    done.put(partition, new OffsetAndMetadata(nextOffset));
  }

  /**
   * The record of {@code partition} at {@code offset} is not done after all (its outcome could not
   * be recorded): nothing at or past it is committed.
   */
  void undone(TopicPartition partition, long offset) {
    OffsetAndMetadata next = done.get(partition);
    if (next == null || next.offset() > offset) {
      done.put(partition, new OffsetAndMetadata(offset));
    }
  }

  /** The offsets to commit; the caller clears them once committed. */
  Map<TopicPartition, OffsetAndMetadata> offsetsToCommit() {
    return done;
  }

  /** The failures so far of the record at {@code offset}, if it is the one that failed. */
  @Nullable Failure failureOf(TopicPartition partition, long offset) {
    Failure failure = failures.get(partition);
    if (failure != null && failure.offset() != offset) {
      failures.remove(partition);
      return null;
    }
    return failure;
  }

  void failed(TopicPartition partition, Failure failure) {
    failures.put(partition, failure);
  }

  /** The next wait of a record held again, doubling from {@code initial} up to {@code max}. */
  Duration nextHold(TopicPartition partition, Duration initial, Duration max) {
    int holds = consecutiveHolds.merge(partition, 1, Integer::sum);
    return Durations.doubling(initial, max, holds);
  }

  /** The partition's next record is held because the dedup store could not be reached. */
  void waitingForStore(TopicPartition partition) {
    waitingForStore.add(partition);
  }

  /**
   * The dedup store answered (a record was handled): the partitions held for it are due now, their
   * back-off from the start. After a long outage (a failover) they would otherwise sleep out a
   * back-off grown to its longest while the store is back.
   */
  void storeAnswered(long nowNanos) {
    if (waitingForStore.isEmpty()) {
      return;
    }
    for (TopicPartition partition : waitingForStore) {
      resumeAtNanos.computeIfPresent(partition, (p, at) -> nowNanos);
      consecutiveHolds.remove(partition);
    }
    waitingForStore.clear();
  }

  /**
   * Where to hold the partition for a record at {@code offset} whose outcome is not recorded: that
   * offset, or the earlier one it is held at already. Nothing of a partition is handled while it is
   * paused, so a later hold at a later offset comes from records fetched before the first hold (a
   * poll whose settle failed holds each of its partitions at its first record): held there, the
   * records between were never delivered again, and the loop committed past them.
   */
  long holdOffset(TopicPartition partition, long offset) {
    Long held = heldAt.get(partition);
    return held == null ? offset : Math.min(held, offset);
  }

  void pausedUntil(TopicPartition partition, long offset, long resumeAtNanos) {
    this.resumeAtNanos.put(partition, resumeAtNanos);
    heldAt.put(partition, offset);
  }

  /** Whether the partition is paused: sought back to a record that waits. */
  boolean isPaused(TopicPartition partition) {
    return resumeAtNanos.containsKey(partition);
  }

  /** The paused partitions whose wait is over, forgotten as paused. */
  List<TopicPartition> dueAt(long nowNanos) {
    List<TopicPartition> due =
        resumeAtNanos.entrySet().stream()
            .filter(entry -> entry.getValue() - nowNanos <= 0)
            .map(Map.Entry::getKey)
            .toList();
    due.forEach(
        partition -> {
          resumeAtNanos.remove(partition);
          heldAt.remove(partition);
        });
    return due;
  }

  /** How long until the first paused partition is due, at most {@code longest}. */
  Duration untilFirstDue(long nowNanos, Duration longest) {
    long wait = longest.toNanos();
    for (long resumeAt : resumeAtNanos.values()) {
      wait = Math.min(wait, Math.max(0, resumeAt - nowNanos));
    }
    return Duration.ofNanos(wait);
  }

  /** The partition's next record is settled: its holds and failures start again from zero. */
  void settled(TopicPartition partition) {
    failures.remove(partition);
    consecutiveHolds.remove(partition);
    waitingForStore.remove(partition);
  }

  /** The partitions left this consumer: nothing about them holds any more. */
  void forget(Collection<TopicPartition> partitions) {
    for (TopicPartition partition : partitions) {
      done.remove(partition);
      resumeAtNanos.remove(partition);
      heldAt.remove(partition);
      consecutiveHolds.remove(partition);
      failures.remove(partition);
      waitingForStore.remove(partition);
    }
  }
}
