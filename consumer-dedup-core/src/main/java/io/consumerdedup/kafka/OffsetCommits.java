package io.consumerdedup.kafka;

import io.consumerdedup.core.internal.FaultPoints;
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.RebalanceInProgressException;
import org.apache.kafka.common.errors.WakeupException;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * How {@link DedupPollLoop} commits: only past the records that are done and whose SUCCESS marks
 * are written (it waits for those in flight first). After each poll with {@code commitAsync}, so
 * that the loop goes on with the next poll while the broker writes the offsets; before partitions
 * are revoked and when the loop stops with {@code commitSync}, which also covers the asynchronous
 * commits not answered yet (and those that failed). An offset whose commit is lost is only
 * committed later, or its records come again: as duplicates, their SUCCESS being written. The
 * consumer must leave committing to the loop (no auto-commit) and have a group to commit to; the
 * checks of that, when the loop is built, are here too. Commits are made on the loop's thread only
 * (the consumer answers asynchronous commits on it, in its polls and commits).
 */
final class OffsetCommits {
  // The loop's logger: applications and tests select the loop's messages by its name.
  private static final Logger log = LoggerFactory.getLogger(DedupPollLoop.class);

  private final Consumer<?, ?> consumer;
  private final PartitionProgress progress;
  private final PollClaims<?, ?> pollClaims;

  /** The offsets committed asynchronously whose answer has not come yet, by partition. */
  private final Map<TopicPartition, OffsetAndMetadata> unanswered = new HashMap<>();

  /** When the loop's stop must be over ({@link System#nanoTime()}); null while it runs. */
  private @Nullable Long stopDeadlineNanos;

  OffsetCommits(Consumer<?, ?> consumer, PartitionProgress progress, PollClaims<?, ?> pollClaims) {
    this.consumer = consumer;
    this.progress = progress;
    this.pollClaims = pollClaims;
  }

  /**
   * A copy of the configuration of a consumer the loop will make.
   *
   * @throws IllegalArgumentException if it has no {@code group.id}, or does not set {@code
   *     enable.auto.commit} to false
   */
  static Map<String, Object> checkedConfig(Map<String, Object> consumerConfig) {
    Object autoCommit = consumerConfig.get(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG);
    if (autoCommit == null
        || !"false".equals(String.valueOf(autoCommit).trim().toLowerCase(Locale.ROOT))) {
      throw new IllegalArgumentException(
          ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG
              + " must be false (it is "
              + (autoCommit == null ? "not set, and Kafka's default is true" : autoCommit)
              + "): DedupPollLoop commits offsets itself, only past records that are done");
    }
    Object group = consumerConfig.get(ConsumerConfig.GROUP_ID_CONFIG);
    if (group == null || String.valueOf(group).isBlank()) {
      throw new IllegalArgumentException(
          ConsumerConfig.GROUP_ID_CONFIG
              + " is required: DedupPollLoop commits offsets to the consumer group");
    }
    return Map.copyOf(consumerConfig);
  }

  /**
   * The consumer's group.
   *
   * @param madeByTheLoop whether to close the consumer when it has none
   * @throws IllegalStateException if it has none
   */
  static String groupOf(Consumer<?, ?> consumer, boolean madeByTheLoop) {
    try {
      return consumer.groupMetadata().groupId();
    } catch (KafkaException e) {
      if (madeByTheLoop) {
        consumer.close();
      }
      throw new IllegalStateException(
          "The consumer needs a group.id: DedupPollLoop commits offsets to its group", e);
    }
  }

  /**
   * Commits the offsets of the records done since the last commit, asynchronously, once the SUCCESS
   * marks still in flight are written (a partition whose mark is not is held at that record).
   */
  void commitDone() {
    pollClaims.awaitMarks();
    Map<TopicPartition, OffsetAndMetadata> done = progress.offsetsToCommit();
    if (done.isEmpty()) {
      return;
    }
    FaultPoints.reached(FaultPoints.Point.BEFORE_OFFSET_COMMIT);
    Map<TopicPartition, OffsetAndMetadata> offsets = Map.copyOf(done);
    done.clear();
    unanswered.putAll(offsets);
    try {
      consumer.commitAsync(offsets, (committed, e) -> answered(offsets, e));
    } catch (WakeupException | InterruptException e) {
      throw e;
    } catch (KafkaException e) {
      answered(offsets, e);
    }
  }

  /** The answer to an asynchronous commit of {@code offsets}: failed if {@code e} is not null. */
  private void answered(Map<TopicPartition, OffsetAndMetadata> offsets, @Nullable Exception e) {
    offsets.forEach(unanswered::remove); // the entries a later commit replaced stay
    if (e == null) {
      return;
    }
    Set<TopicPartition> assigned = consumer.assignment();
    Map<TopicPartition, OffsetAndMetadata> retried = new HashMap<>();
    offsets.forEach(
        (partition, offset) -> {
          // Committed again with the next commit, unless a later offset of the partition is on
          // its way or the partition is gone (its new owner re-reads from what was committed).
          if (assigned.contains(partition)
              && !unanswered.containsKey(partition)
              && progress.offsetsToCommit().putIfAbsent(partition, offset) == null) {
            retried.put(partition, offset);
          }
        });
    if (e instanceof CommitFailedException || e instanceof RebalanceInProgressException) {
      log.warn(
          "Offsets {} not committed (group rebalancing); committing again {} with the next commit",
          offsets,
          retried,
          e);
    } else {
      log.error(
          "Offsets {} not committed; committing again {} with the next commit",
          offsets,
          retried,
          e);
    }
  }

  /**
   * Commits, synchronously, the offsets of the records done and those of asynchronous commits not
   * answered yet, once the SUCCESS marks still in flight are written.
   */
  private void commitNow() {
    pollClaims.awaitMarks();
    Map<TopicPartition, OffsetAndMetadata> done = progress.offsetsToCommit();
    Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>(unanswered);
    offsets.putAll(done);
    if (offsets.isEmpty()) {
      return;
    }
    FaultPoints.reached(FaultPoints.Point.BEFORE_OFFSET_COMMIT);
    try {
      if (stopDeadlineNanos == null) {
        consumer.commitSync(offsets);
      } else {
        consumer.commitSync(offsets, untilStopDeadline());
      }
      done.clear();
      unanswered.clear();
    } catch (CommitFailedException | RebalanceInProgressException e) {
      // The offsets stay owed: a cooperative rebalance revokes only some partitions, and those
      // this consumer keeps are committed with its next commit (dropped here, they were never
      // committed unless more records came, and a restart delivered their records again). Those
      // of partitions it loses are forgotten as they go; their new owner re-reads those records,
      // and the dedup table answers DUPLICATE for those that were handled.
      if (stopDeadlineNanos == null) {
        log.warn(
            "Offsets {} not committed (group rebalancing); those of the partitions this consumer"
                + " keeps are committed with its next commit, the others redelivered to their new"
                + " owner",
            offsets,
            e);
      } else {
        log.warn(
            "Offsets {} not committed (group rebalancing) as the loop stops; they will be"
                + " redelivered",
            offsets,
            e);
      }
    } catch (WakeupException | InterruptException e) {
      throw e;
    } catch (KafkaException e) {
      if (stopDeadlineNanos == null) {
        log.error("Offsets {} not committed; trying again after the next poll", offsets, e);
      } else {
        // Stopping: there is no next poll. The partitions' next owner reads these records again,
        // and the dedup table answers DUPLICATE for those that were handled.
        log.error(
            "Offsets {} not committed as the loop stops; they will be redelivered", offsets, e);
      }
    }
  }

  /**
   * From now on, the commits (the last one, and that of the rebalance listener as the consumer
   * closes) wait for the broker no later than {@code deadlineNanos}: left to the consumer's default
   * ({@code default.api.timeout.ms}, 60 s, for each), a broker that stopped answering kept the loop
   * stopping long after {@link DedupPollLoop#close()} had given up waiting, its consumer still in
   * the group. Offsets not committed by then come again to the partitions' next owner, as
   * duplicates.
   */
  void stopBy(long deadlineNanos) {
    stopDeadlineNanos = deadlineNanos;
  }

  /** The time left until the deadline of {@link #stopBy}; zero once it is past. */
  Duration untilStopDeadline() {
    Long deadline = stopDeadlineNanos;
    return deadline == null
        ? Duration.ZERO
        : Duration.ofNanos(Math.max(0, deadline - System.nanoTime()));
  }

  /** Commits when the loop stops, after the stop request's wakeup. */
  void commitLast() {
    try {
      commitNow();
    } catch (WakeupException e) {
      // The stop request's wakeup was still pending; it is consumed now, so commit once more.
      commitNow();
    }
  }

  /** Commits before partitions are revoked; a failure is logged, their new owner redelivers. */
  void commitBeforeRevoke() {
    try {
      try {
        commitNow();
      } catch (WakeupException e) {
        // A stop request (or another wakeup) that arrived as the rebalance takes the partitions:
        // no failure, and the commit is owed all the same. The throw has spent the wakeup, so the
        // commit is made once more, and the wakeup handed on to the poll that runs this callback,
        // which then ends for the stop as it would have.
        try {
          commitNow();
        } finally {
          consumer.wakeup();
        }
      }
    } catch (RuntimeException e) {
      log.warn(
          "Offsets {} not committed before the partitions were revoked",
          progress.offsetsToCommit(),
          e);
    }
  }

  /** The partitions left this consumer: their commits not answered yet are not made again. */
  void forget(Collection<TopicPartition> partitions) {
    partitions.forEach(unanswered::remove);
  }
}
