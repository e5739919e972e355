package io.consumerdedup.spring.internal;

import io.consumerdedup.core.DedupExecutorClosedException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupLeaseLostException;
import io.consumerdedup.core.IdempotentExecutor;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.NavigableMap;
import java.util.NavigableSet;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.BooleanSupplier;
import java.util.function.Function;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The SUCCESS marks of one consumer's records that are written in the background, grouped with
 * others into one statement, and what its offset commits may pass. A commit goes only up to the
 * first record whose mark is not written: one still on its way, or one the database did not take
 * (unreachable, or refusing), which the engine keeps and writes in the background while it renews
 * the lease. What a commit could not pass is owed: a later commit passes it once those marks are
 * written ({@link PollAwareConsumer}). A commit does not wait for marks on their way (they are
 * awaited before the next poll's listeners run, {@link #awaitAll}), except when partitions are
 * revoked or the consumer closes. A mark refused because another consumer took the key over (its
 * lease had run out) is passed: the key's outcome is that consumer's now, as it would be for a
 * record committed just before.
 *
 * <p>One record may have several marks: a listener may call several {@code @Idempotent} methods on
 * it (one per biz type), each with its key, and a commit passes the record only once every one is
 * written.
 *
 * <p>Marks are added by the listener thread, or by the thread completing an asynchronous listener's
 * future; the rest runs on the consumer thread.
 */
public final class SuccessMarks {
  private static final Logger log = LoggerFactory.getLogger(SuccessMarks.class);

  /** By partition and offset, the marks of each record, one per key. Guarded by this. */
  private final Map<TopicPartition, NavigableMap<Long, Mark>> marks = new HashMap<>();

  /** Which marks of a record to drop ({@link #without}). */
  private enum Drop {
    /** The mark of a key. */
    OF_KEY,
    /** The marks a commit may pass ({@link Mark#passable}). */
    PASSABLE,
    /** The marks written: passable for good. */
    DURABLE;

    boolean picks(Mark mark, @Nullable DedupKey key) {
      return switch (this) {
        case OF_KEY -> mark.key.equals(key);
        case PASSABLE -> mark.passable();
        case DURABLE -> mark.written.isDone() && !mark.written.isCompletedExceptionally();
      };
    }
  }

  /** What commits were asked to pass and could not yet, by partition. Guarded by this. */
  private final Map<TopicPartition, OffsetAndMetadata> owed = new HashMap<>();

  /**
   * The offset of the last commit sent through this consumer, by partition: what Kafka holds once
   * it is answered. Not the highest ever sent: after the application seeks a partition back (a
   * replay), a commit cut at a mark goes below it, and what the cut left owed would be taken for
   * committed. Guarded by this.
   */
  private final Map<TopicPartition, Long> committed = new HashMap<>();

  /**
   * By partition, the records whose container transaction did not commit and that have not been
   * passed since ({@link #rolledBack}): no commit goes past the first. Guarded by this.
   */
  private final Map<TopicPartition, NavigableSet<Long>> held = new HashMap<>();

  /** Whether a mark was added since {@link #awaitAll} last ran. Guarded by this. */
  private boolean addedSinceAwait;

  /**
   * The SUCCESS mark of one key of a record, and through {@link #next} those of the record's other
   * keys: a chain, so that a record with one key, the common case, costs one object.
   */
  private static final class Mark {
    final DedupKey key;
    final String source;
    final CompletableFuture<Void> written;
    final long waitNanos;
    final BooleanSupplier kept;
    boolean reported;

    /** The mark of another key of the same record. Guarded by the {@link SuccessMarks}. */
    @Nullable Mark next;

    Mark(
        DedupKey key,
        String source,
        CompletableFuture<Void> written,
        long waitNanos,
        BooleanSupplier kept) {
      this.key = key;
      this.source = source;
      this.written = written;
      this.waitNanos = waitNanos;
      this.kept = kept;
    }

    /** Whether a commit may pass the record: its SUCCESS is durable, or no longer ours. */
    boolean passable() {
      if (!written.isDone()) {
        return false;
      }
      Throwable failure = failureOf(written);
      if (failure == null) {
        return true;
      }
      if (failure instanceof DedupExecutorClosedException) {
        return false; // given up: the record must come again
      }
      if (failure instanceof DedupLeaseLostException) {
        if (!reported) {
          reported = true;
          log.warn(
              "The SUCCESS of {} was refused: another consumer took its key over (its lease had"
                  + " run out), and its outcome is that consumer's; committing past it",
              source);
        }
        return true;
      }
      // Kept by the engine and written in the background while it renews the lease; once it is
      // no longer kept, it was written (or the key was taken over meanwhile).
      return !stillKept(failure);
    }

    private boolean stillKept(Throwable failure) {
      boolean stillKept = kept.getAsBoolean();
      if (stillKept && !reported) {
        reported = true;
        log.warn(
            "The SUCCESS of {} is not written yet ({}); it is retried in the background, and"
                + " nothing is committed past the record until it is written",
            source,
            failure.toString());
      }
      return stillKept;
    }
  }

  /**
   * Whether {@code writer} still keeps the SUCCESS of {@code key} after a write of it failed, to
   * write it in the background ({@link #add}'s {@code kept}). A closed writer gave its unwritten
   * outcomes up and no longer lists them: their records must not be passed either.
   */
  public static BooleanSupplier keptBy(IdempotentExecutor writer, DedupKey key) {
    return () -> writer.isClosed() || writer.unrecordedOutcomes().containsKey(key);
  }

  /**
   * The SUCCESS of {@code key}, claimed for {@code record}, is on its way: {@code written}
   * completes once it is durable. It replaces an earlier mark of that key only (an earlier
   * delivery's), never the mark of another key of the record.
   *
   * @param waitAtMost how long a commit waits for it before committing only up to the record
   * @param kept whether the engine still keeps the mark, after {@code written} failed, to write it
   *     in the background
   */
  public synchronized void add(
      ConsumerRecord<?, ?> record,
      DedupKey key,
      String source,
      CompletableFuture<Void> written,
      Duration waitAtMost,
      BooleanSupplier kept) {
    Mark mark = new Mark(key, source, written, waitAtMost.toNanos(), kept);
    Mark others =
        marks
            .computeIfAbsent(
                new TopicPartition(record.topic(), record.partition()), p -> new TreeMap<>())
            .put(record.offset(), mark);
    if (others != null) {
      mark.next = without(others, Drop.OF_KEY, key);
    }
    addedSinceAwait = true;
  }

  /**
   * {@code key}, claimed for {@code record}, was found SUCCESS (an earlier delivery's mark written
   * since, or taken up by another consumer): its mark is not waited for. The marks of the record's
   * other keys still are.
   */
  public synchronized void written(ConsumerRecord<?, ?> record, DedupKey key) {
    NavigableMap<Long, Mark> partition =
        marks.get(new TopicPartition(record.topic(), record.partition()));
    if (partition == null) {
      return;
    }
    Mark marksOfRecord = partition.get(record.offset());
    if (marksOfRecord == null) {
      return;
    }
    Mark rest = without(marksOfRecord, Drop.OF_KEY, key);
    if (rest == null) {
      partition.remove(record.offset());
    } else if (rest != marksOfRecord) {
      partition.put(record.offset(), rest);
    }
  }

  /**
   * The chain of marks {@code first} without those {@code drop} picks ({@code key}'s, for {@link
   * Drop#OF_KEY}); null if none is left. Called holding the lock.
   */
  private static @Nullable Mark without(Mark first, Drop drop, @Nullable DedupKey key) {
    Mark head = first;
    while (head != null && drop.picks(head, key)) {
      head = head.next;
    }
    if (head == null) {
      return null;
    }
    for (Mark kept = head; kept.next != null; ) {
      if (drop.picks(kept.next, key)) {
        kept.next = kept.next.next;
      } else {
        kept = kept.next;
      }
    }
    return head;
  }

  /**
   * Drops from the marks of one record those {@code drop} picks, and says whether none is left (the
   * entry is then to be removed). Called holding the lock.
   */
  private static boolean noneLeft(Map.Entry<Long, Mark> record, Drop drop) {
    Mark rest = without(record.getValue(), drop, null);
    if (rest == null) {
      return true;
    }
    if (rest != record.getValue()) {
      record.setValue(rest);
    }
    return false;
  }

  /**
   * The container transaction of {@code record} did not commit (rolled back, or its commit failed):
   * no commit passes the record until it is passed ({@link #transactionCommitted}, {@link
   * #passedBy}). spring-kafka queues a record's offset inside its transaction, in every ack mode
   * but {@code RECORD} and {@code MANUAL_IMMEDIATE}, and commits the queue after the poll, or when
   * the container stops, whatever that transaction's outcome: with the container stopped or the
   * process gone before the record comes again, that commit would lose it.
   */
  synchronized void rolledBack(ConsumerRecord<?, ?> record) {
    held.computeIfAbsent(
            new TopicPartition(record.topic(), record.partition()), p -> new TreeSet<>())
        .add(record.offset());
  }

  /**
   * The container transaction of {@code record} committed: the records of its partition up to it
   * are done (that one applied, the ones before it too or given up), and no longer held.
   */
  synchronized void transactionCommitted(ConsumerRecord<?, ?> record) {
    TopicPartition partition = new TopicPartition(record.topic(), record.partition());
    NavigableSet<Long> offsets = held.get(partition);
    if (offsets != null) {
      offsets.headSet(record.offset(), true).clear();
      if (offsets.isEmpty()) {
        held.remove(partition);
      }
    }
  }

  /**
   * Lets go the holds that the consumer's position has passed: the record was given up (an error
   * handler or after-rollback processor recovered it and went on), and will not come again.
   *
   * @param position the consumer's position in a partition, null if that partition is no longer
   *     assigned (its holds go too)
   */
  void passedBy(Function<TopicPartition, @Nullable Long> position) {
    Set<TopicPartition> partitions;
    synchronized (this) {
      if (held.isEmpty()) {
        return;
      }
      partitions = new HashSet<>(held.keySet());
    }
    for (TopicPartition partition : partitions) {
      Long now = position.apply(partition);
      synchronized (this) {
        NavigableSet<Long> offsets = held.get(partition);
        if (offsets == null) {
          continue;
        }
        if (now == null) {
          offsets.clear();
        } else {
          offsets.headSet(now, false).clear();
        }
        if (offsets.isEmpty()) {
          held.remove(partition);
        }
      }
    }
  }

  /** The partitions are no longer this consumer's: their offsets are committed by another. */
  public synchronized void forget(Collection<TopicPartition> partitions) {
    partitions.forEach(
        partition -> {
          marks.remove(partition);
          owed.remove(partition);
          committed.remove(partition);
          held.remove(partition);
        });
  }

  /** Whether a commit was asked to pass records it could not pass yet. */
  synchronized boolean owes() {
    return !owed.isEmpty();
  }

  synchronized boolean isEmpty() {
    marks.values().removeIf(Map::isEmpty);
    return marks.isEmpty() && owed.isEmpty() && held.isEmpty();
  }

  /**
   * What may be committed of {@code offsets}, which the container asks to commit: each partition
   * cut before its first record whose mark is not written, after waiting for the marks of the
   * records they pass (each at most its wait) if {@code wait}. What is cut is owed.
   */
  public Map<TopicPartition, OffsetAndMetadata> durable(
      Map<TopicPartition, OffsetAndMetadata> offsets, boolean wait) {
    if (wait) {
      await(offsets);
    }
    synchronized (this) {
      Map<TopicPartition, OffsetAndMetadata> allowed = new HashMap<>(offsets);
      for (Map.Entry<TopicPartition, OffsetAndMetadata> commit : offsets.entrySet()) {
        TopicPartition partition = commit.getKey();
        OffsetAndMetadata requested = commit.getValue();
        long cut = cut(partition, requested.offset());
        if (cut < requested.offset()) {
          allowed.put(partition, new OffsetAndMetadata(cut, requested.metadata()));
          OffsetAndMetadata earlier = owed.get(partition);
          if (earlier == null || earlier.offset() < requested.offset()) {
            owed.put(partition, requested);
          }
          Long last = committed.get(partition);
          if (last != null && last > cut) {
            // The partition was sought back (a replay): this commit goes below the last one, which
            // is not to be taken for having paid what this one leaves owed ({@link #owedNow}, which
            // the commit's other partitions run before it is sent).
            committed.put(partition, cut);
          }
        }
        // An owed offset this commit reaches goes once the commit is sent ({@link #committed}).
      }
      return allowed;
    }
  }

  /**
   * What the consumer owes and may commit now (waiting for its marks first if {@code wait}): the
   * offsets commits were asked to pass, cut where marks are still not written, for partitions where
   * that goes further than the last commit.
   */
  Map<TopicPartition, OffsetAndMetadata> owedNow(boolean wait) {
    if (wait) {
      Map<TopicPartition, OffsetAndMetadata> owedOffsets;
      synchronized (this) {
        owedOffsets = new HashMap<>(owed);
      }
      await(owedOffsets);
    }
    return owedNow();
  }

  private synchronized Map<TopicPartition, OffsetAndMetadata> owedNow() {
    Map<TopicPartition, OffsetAndMetadata> now = new HashMap<>();
    Iterator<Map.Entry<TopicPartition, OffsetAndMetadata>> entries = owed.entrySet().iterator();
    while (entries.hasNext()) {
      Map.Entry<TopicPartition, OffsetAndMetadata> entry = entries.next();
      TopicPartition partition = entry.getKey();
      Long last = committed.get(partition);
      if (last != null && last >= entry.getValue().offset()) {
        entries.remove(); // committed since
        continue;
      }
      long cut = cut(partition, entry.getValue().offset());
      // Kept until the commit is sent ({@link #committed}): a commit that fails is tried again.
      if (last == null || cut > last) {
        now.put(
            partition,
            cut == entry.getValue().offset()
                ? entry.getValue()
                : new OffsetAndMetadata(cut, entry.getValue().metadata()));
      }
    }
    return now;
  }

  /**
   * The consumer committed {@code offsets} (sent them, for an asynchronous commit: Kafka applies a
   * consumer's commits in the order they are sent): what was owed up to them is paid.
   */
  synchronized void committed(Map<TopicPartition, OffsetAndMetadata> offsets) {
    offsets.forEach(
        (partition, offset) -> {
          committed.put(partition, offset.offset());
          OffsetAndMetadata owedOffset = owed.get(partition);
          if (owedOffset != null && owedOffset.offset() <= offset.offset()) {
            owed.remove(partition);
          }
        });
  }

  /**
   * A commit of {@code offsets}, counted as sent ({@link #committed}), failed: what it passed is
   * owed again, for each partition to which no later commit was sent since and that was not let go
   * meanwhile ({@link #forget}; its new owner re-reads from what was committed).
   */
  synchronized void notCommitted(Map<TopicPartition, OffsetAndMetadata> offsets) {
    offsets.forEach(
        (partition, offset) -> {
          if (committed.remove(partition, offset.offset())) {
            owed.merge(
                partition,
                offset,
                (earlier, failed) -> earlier.offset() >= failed.offset() ? earlier : failed);
          }
        });
  }

  /**
   * The first offset of {@code partition} before {@code end} whose record a commit may not pass yet
   * (its mark not written, or its transaction rolled back), or {@code end}; forgets the marks it
   * may pass. Called holding the lock.
   */
  private long cut(TopicPartition partition, long end) {
    NavigableSet<Long> holds = held.get(partition);
    if (holds != null && !holds.isEmpty() && holds.first() < end) {
      end = holds.first();
    }
    NavigableMap<Long, Mark> partitionMarks = marks.get(partition);
    if (partitionMarks == null) {
      return end;
    }
    Iterator<Map.Entry<Long, Mark>> before =
        partitionMarks.headMap(end, false).entrySet().iterator();
    while (before.hasNext()) {
      Map.Entry<Long, Mark> entry = before.next();
      if (!noneLeft(entry, Drop.PASSABLE)) {
        return entry.getKey();
      }
      before.remove();
    }
    return end;
  }

  /**
   * Waits until every mark added so far is written or failed, each at most its wait. Forgets the
   * marks found written: no commit waits for them, and a consumer whose container commits nothing
   * (one of no group, its partitions assigned by hand) would otherwise list every record's mark for
   * as long as it runs, each looked through again at every poll.
   *
   * @return whether a mark was added since the last call
   */
  public boolean awaitAll() {
    List<Mark> pending = new ArrayList<>();
    boolean added;
    synchronized (this) {
      added = addedSinceAwait;
      addedSinceAwait = false;
      for (NavigableMap<Long, Mark> partition : marks.values()) {
        Iterator<Map.Entry<Long, Mark>> each = partition.entrySet().iterator();
        while (each.hasNext()) {
          Map.Entry<Long, Mark> record = each.next();
          // A durable mark is passable for good. A failed one stays: it may still hold a commit
          // back, and a share batch reports it as not written (awaitUnwritten).
          if (noneLeft(record, Drop.DURABLE)) {
            each.remove();
            continue;
          }
          for (Mark mark = record.getValue(); mark != null; mark = mark.next) {
            if (!mark.written.isDone()) {
              pending.add(mark);
            }
          }
        }
      }
      marks.values().removeIf(Map::isEmpty);
    }
    await(pending);
    return added;
  }

  /**
   * For a share listener's batch, whose records are acknowledged one by one: waits until every mark
   * is written or failed (each at most its wait), then forgets them all.
   *
   * @return where the records are whose SUCCESS is not written: not yet, refused, or no longer this
   *     consumer's to write (the key taken over); such a record is not acknowledged but processed
   *     again, which finds its key's outcome then
   */
  public Set<Coordinates> awaitUnwritten() {
    awaitAll();
    Set<Coordinates> unwritten = new HashSet<>();
    synchronized (this) {
      for (Map.Entry<TopicPartition, NavigableMap<Long, Mark>> partition : marks.entrySet()) {
        TopicPartition where = partition.getKey();
        for (Map.Entry<Long, Mark> record : partition.getValue().entrySet()) {
          for (Mark mark = record.getValue(); mark != null; mark = mark.next) {
            if (!mark.written.isDone() || mark.written.isCompletedExceptionally()) {
              unwritten.add(new Coordinates(where.topic(), where.partition(), record.getKey()));
              break;
            }
          }
        }
      }
      marks.clear();
    }
    if (!unwritten.isEmpty()) {
      log.debug("{} SUCCESS marks of a share batch are not written yet", unwritten.size());
    }
    return unwritten;
  }

  /**
   * Waits for the marks of the records {@code offsets} passes, until the longest of their waits.
   */
  private void await(Map<TopicPartition, OffsetAndMetadata> offsets) {
    List<Mark> passed = new ArrayList<>();
    synchronized (this) {
      for (Map.Entry<TopicPartition, OffsetAndMetadata> commit : offsets.entrySet()) {
        NavigableMap<Long, Mark> partition = marks.get(commit.getKey());
        if (partition != null) {
          for (Mark marksOfRecord : partition.headMap(commit.getValue().offset(), false).values()) {
            for (Mark mark = marksOfRecord; mark != null; mark = mark.next) {
              if (!mark.written.isDone()) {
                passed.add(mark);
              }
            }
          }
        }
      }
    }
    await(passed);
  }

  /** Waits for each mark until the longest of their waits has passed. */
  private static void await(List<Mark> passed) {
    long waitNanos = 0;
    for (Mark mark : passed) {
      waitNanos = Math.max(waitNanos, mark.waitNanos);
    }
    long deadline = System.nanoTime() + waitNanos;
    for (Mark mark : passed) {
      try {
        mark.written.get(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
      } catch (ExecutionException | TimeoutException e) {
        // Judged with the others once the wait is over.
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return;
      }
    }
  }

  private static @Nullable Throwable failureOf(CompletableFuture<Void> written) {
    if (!written.isCompletedExceptionally()) {
      return null;
    }
    try {
      written.getNow(null);
      return null;
    } catch (CompletionException e) {
      return e.getCause() != null ? e.getCause() : e;
    } catch (RuntimeException e) {
      return e;
    }
  }
}
