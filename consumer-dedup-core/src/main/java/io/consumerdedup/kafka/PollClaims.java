package io.consumerdedup.kafka;

import io.consumerdedup.core.internal.FailureTexts;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.common.TopicPartition;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The two ends of one poll in {@link DedupPollLoop}: before its records are handled, the processor
 * {@link RecordProcessor#prepare prepares} them together (an {@link IdempotentRecordHandler} claims
 * their keys in one round trip); after, it {@link RecordProcessor#settle settles} them, and a
 * record whose outcome is not recorded yet holds its partition, so that nothing is committed past
 * it. The SUCCESS marks an {@link IdempotentRecordHandler} writes in the background are left in
 * flight ({@link MarksInFlight}) when the poll is settled: the loop fetches and claims its next
 * poll while they commit, and {@link #awaitMarks()} waits for them before anything is committed.
 * Used by the loop's thread only.
 */
final class PollClaims<K, V> {
  // The loop's logger: applications and tests select the loop's messages by its name.
  private static final Logger log = LoggerFactory.getLogger(DedupPollLoop.class);

  private final Consumer<K, V> consumer;
  private final RecordProcessor<K, V> processor;
  private final PartitionProgress progress;
  private final PartitionHolds holds;

  /** The marks of the poll settled last, until {@link #awaitMarks()}. */
  private @Nullable MarksInFlight inFlight;

  PollClaims(
      Consumer<K, V> consumer,
      RecordProcessor<K, V> processor,
      PartitionProgress progress,
      PartitionHolds holds) {
    this.consumer = consumer;
    this.processor = processor;
    this.progress = progress;
    this.holds = holds;
  }

  /** Whether SUCCESS marks of the last poll may still be on their way. */
  boolean marksInFlight() {
    return inFlight != null;
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
      // What an application's processor threw: Logback prints it, and one whose getMessage()
      // throws ended the loop here.
      log.warn(
          "Could not prepare {} records together; processing them one by one",
          polled.size(),
          FailureTexts.loggable(e));
    }
  }

  /**
   * Opens the marks of the poll about to be handled on this thread; {@link #settle} closes them.
   */
  void open() {
    MarksInFlight.openOnThisThread();
  }

  /**
   * Settles the poll: the processor gives back what it prepared for records the loop did not get
   * to, and each partition is held at its first record whose outcome is known not to be recorded.
   * The poll's SUCCESS marks stay in flight until {@link #awaitMarks()}.
   */
  void settle(ConsumerRecords<K, V> records) {
    awaitMarks(); // those of an earlier poll that no commit has waited for (none, usually)
    MarksInFlight marks = MarksInFlight.open();
    List<ConsumerRecord<K, V>> unrecorded;
    @Nullable Error fatal = null;
    try {
      unrecorded = processor.settle();
    } catch (RuntimeException | Error e) {
      // Which outcomes are recorded is unknown: the whole poll comes again (those recorded as
      // duplicates), rather than the loop moving on past records whose outcome may be lost. An
      // Error too, which ends the loop: its last commit went past the whole poll.
      log.error(
          "Could not settle the poll's records; delivering them again", FailureTexts.loggable(e));
      unrecorded = new ArrayList<>();
      for (TopicPartition partition : records.partitions()) {
        unrecorded.add(records.records(partition).get(0));
      }
      if (e instanceof Error error) {
        fatal = error;
      }
    } finally {
      MarksInFlight.closeOnThisThread();
      if (marks != null && !marks.isEmpty()) {
        inFlight = marks;
      }
    }
    hold(unrecorded);
    if (fatal != null) {
      throw fatal;
    }
  }

  /**
   * Waits for the SUCCESS marks of the poll settled last, and holds each partition at its first
   * record whose mark is not written: nothing is committed past it, and it comes again (a duplicate
   * then, once the mark is written). Called before every commit.
   */
  void awaitMarks() {
    MarksInFlight marks = inFlight;
    if (marks == null) {
      return;
    }
    List<ConsumerRecord<K, V>> awaited = marks.records();
    inFlight = null;
    Set<TopicPartition> assigned = consumer.assignment();
    List<ConsumerRecord<K, V>> unrecorded;
    try {
      unrecorded = marks.await(log);
    } catch (RuntimeException | Error e) {
      // Which marks are written is unknown (an OutOfMemoryError as the wait's WARN line was
      // formatted): each record awaited is taken as not written. Forgotten, their records counted
      // as done, and the loop's last commit, as the Error ended it, went past records whose
      // SUCCESS was still being written.
      unrecorded = awaited;
      try {
        hold(assignedOnly(unrecorded, assigned));
      } catch (RuntimeException | Error again) {
        e.addSuppressed(again);
      }
      throw e;
    }
    hold(assignedOnly(unrecorded, assigned));
  }

  private List<ConsumerRecord<K, V>> assignedOnly(
      List<ConsumerRecord<K, V>> records, Set<TopicPartition> assigned) {
    return records.stream()
        .filter(record -> assigned.contains(new TopicPartition(record.topic(), record.partition())))
        .toList();
  }

  private void hold(List<ConsumerRecord<K, V>> unrecorded) {
    Map<TopicPartition, Long> first = new HashMap<>();
    for (ConsumerRecord<K, V> record : unrecorded) {
      first.merge(
          new TopicPartition(record.topic(), record.partition()), record.offset(), Math::min);
    }
    first.forEach(
        (partition, firstUnrecorded) -> {
          // A partition held at an earlier record already stays there, and nothing is committed
          // past that one: its offset may be committed, and the records since not done.
          long offset = progress.holdOffset(partition, firstUnrecorded);
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
