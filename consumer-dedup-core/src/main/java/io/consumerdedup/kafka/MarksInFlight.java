package io.consumerdedup.kafka;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;

/**
 * The SUCCESS marks of one poll's records that are being written in the background: nothing may be
 * committed past a record until its mark is written. {@link IdempotentRecordHandler} keeps its own
 * when a caller drives it ({@link IdempotentRecordHandler#settle()} waits for them); under {@link
 * DedupPollLoop} it hands them to the loop instead, which waits for them only after it has fetched
 * and claimed its next poll, so that the marks commit while it does.
 *
 * <p>The loop opens one on its thread for each poll ({@link #openOnThisThread}), and the handler
 * finds it there ({@link #open()}), whatever processors wrap the handler (a metrics wrapper, the
 * test kit's redelivery): they pass {@code process} and {@code settle} on, but would not pass on a
 * method of their interface that they do not know. Used by one thread at a time.
 */
final class MarksInFlight {
  @SuppressWarnings("ThreadLocalUsage") // the poll open on each loop thread
  private static final ThreadLocal<@Nullable MarksInFlight> OPEN = new ThreadLocal<>();

  private final List<Mark> marks = new ArrayList<>();
  private Duration longestWait = Duration.ZERO;

  /** A processed record and the write of its SUCCESS. */
  private record Mark(ConsumerRecord<?, ?> record, CompletableFuture<Void> written) {}

  /** The marks of the poll the loop is handling on this thread; null outside a loop's poll. */
  static @Nullable MarksInFlight open() {
    return OPEN.get();
  }

  /** Opens a poll's marks on this thread, until {@link #closeOnThisThread()}. */
  static MarksInFlight openOnThisThread() {
    MarksInFlight marks = new MarksInFlight();
    OPEN.set(marks);
    return marks;
  }

  /** Closes the marks open on this thread: the records handled next are not this poll's. */
  static void closeOnThisThread() {
    OPEN.remove();
  }

  /**
   * Adds the mark of {@code record}.
   *
   * @param longestWait how long to wait for it at most: a mark not written by then is treated as
   *     not written (its record delivered again), while its writer keeps its lease
   */
  void add(ConsumerRecord<?, ?> record, CompletableFuture<Void> written, Duration longestWait) {
    marks.add(new Mark(record, written));
    if (longestWait.compareTo(this.longestWait) > 0) {
      this.longestWait = longestWait;
    }
  }

  boolean isEmpty() {
    return marks.isEmpty();
  }

  /** The records of the marks not awaited yet, in the order they were added. */
  <K, V> List<ConsumerRecord<K, V>> records() {
    List<ConsumerRecord<K, V>> records = new ArrayList<>(marks.size());
    for (Mark mark : marks) {
      @SuppressWarnings("unchecked") // the marks of one processor's records
      ConsumerRecord<K, V> record = (ConsumerRecord<K, V>) mark.record();
      records.add(record);
    }
    return records;
  }

  /**
   * Waits until each mark is written or its wait is over, and forgets them.
   *
   * @return the records whose SUCCESS is not written (the database unreachable, the key taken over,
   *     or the wait over), in the order they were added
   */
  <K, V> List<ConsumerRecord<K, V>> await(Logger log) {
    if (marks.isEmpty()) {
      return List.of();
    }
    List<ConsumerRecord<K, V>> unrecorded = new ArrayList<>();
    long deadline = System.nanoTime() + longestWait.toNanos();
    int waitedOut = 0;
    for (Mark mark : marks) {
      @SuppressWarnings("unchecked") // the marks of one processor's records
      ConsumerRecord<K, V> record = (ConsumerRecord<K, V>) mark.record();
      try {
        mark.written().get(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
      } catch (ExecutionException e) {
        log.debug(
            "SUCCESS of {}-{}@{} is not written yet",
            record.topic(),
            record.partition(),
            record.offset(),
            e.getCause());
        unrecorded.add(record);
      } catch (TimeoutException e) {
        waitedOut++;
        unrecorded.add(record);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        unrecorded.add(record);
      }
    }
    if (waitedOut > 0) {
      log.warn(
          "{} SUCCESS marks of the poll not written within {}; delivering their records again",
          waitedOut,
          longestWait);
    }
    marks.clear();
    return unrecorded;
  }
}
