package io.consumerdedup.spring;

import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.spring.internal.AttemptLimit;
import io.consumerdedup.spring.internal.EachRegardless;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;

/**
 * The records of a batch handed to an {@link Idempotent} batch listener: their place in the
 * container's batch, their claim, and the writes of their outcomes (the SUCCESS marks started once,
 * by the method's acknowledgment or when the batch ends, and waited for together).
 *
 * <p>The outcomes are started under this object's lock: the method may acknowledge on another
 * thread (the callback of its last send, as ack mode MANUAL allows) while the container thread ends
 * the batch. Unguarded, the end found a claim the acknowledgment had ended and whose mark it had
 * not handed back yet, did not wait for that mark and let the container commit past the record, or
 * started the same mark again and failed the batch with "already ended".
 */
final class KeptBatchRecords {
  final List<Object> elements = new ArrayList<>();
  final List<ConsumerRecord<Object, Object>> records = new ArrayList<>();
  final List<Integer> batchIndexes = new ArrayList<>();
  final List<@Nullable DedupClaim> claims = new ArrayList<>();
  private final List<@Nullable CompletableFuture<Void>> marks = new ArrayList<>();

  /**
   * @param claim null for a record without a key, processed without dedup
   */
  void add(
      Object element,
      ConsumerRecord<Object, Object> record,
      int batchIndex,
      @Nullable DedupClaim claim) {
    elements.add(element);
    records.add(record);
    batchIndexes.add(batchIndex);
    claims.add(claim);
    marks.add(null);
  }

  int size() {
    return elements.size();
  }

  /**
   * Starts the write of the i-th record's SUCCESS, on the first call (by the method's
   * acknowledgment, or when the batch ends); none for a record without a claim or whose claim ended
   * otherwise. Each is started whatever starting another one threw: an {@code Error} (an {@code
   * OutOfMemoryError}) while starting one must not leave the later ones unstarted, their claims
   * given back and their records run again after a restart.
   */
  private static final EachRegardless.Step<
          List<@Nullable DedupClaim>, List<@Nullable CompletableFuture<Void>>>
      START_MARK =
          (claims, marks, i) -> {
            DedupClaim claim = claims.get(i);
            if (marks.get(i) == null && claim != null && !claim.isEnded()) {
              marks.set(i, claim.completeAsync());
            }
          };

  /**
   * Starts the SUCCESS marks of the records from {@code from} to before {@code end}; the first
   * throwable met is rethrown once all are started.
   */
  synchronized void startMarks(int from, int end) {
    EachRegardless.run(claims, marks, from, end, START_MARK);
  }

  /**
   * Writes SUCCESS for the records before {@code end}, in one store call, and waits for it.
   *
   * @return where the batch must stop: the first record whose SUCCESS is not written (the store
   *     unreachable, the key taken over), or null
   */
  @Nullable BatchStop completeBefore(int end) {
    List<@Nullable CompletableFuture<Void>> started;
    synchronized (this) {
      startMarks(0, end);
      started = new ArrayList<>(marks.subList(0, end));
    }
    BatchStop first = null;
    for (int i = 0; i < end; i++) {
      CompletableFuture<Void> mark = started.get(i);
      if (mark == null) {
        continue;
      }
      try {
        mark.get();
      } catch (ExecutionException e) {
        if (first == null) {
          first = BatchStop.at(batchIndexes.get(i), e.getCause());
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        if (first == null) {
          first = new BatchStop(batchIndexes.get(i), new IllegalStateException(e));
        }
      }
    }
    return first;
  }

  /**
   * Records FAILED for the claims from {@code from} to {@code to} (exclusive) that are not ended,
   * logging the failure.
   */
  synchronized void fail(int from, int to, Throwable error, AttemptLimit attempts) {
    attempts.failAll(unended(from, to), error);
  }

  /**
   * Ends the claims from {@code from} to {@code to} (exclusive) that are not ended, the listener
   * having thrown {@code error}: FAILED and logged, or given back uncounted for an exception that
   * waiting can cure ({@link AttemptLimit#listenerThrewAll}).
   */
  synchronized void listenerThrew(int from, int to, Throwable error, AttemptLimit attempts) {
    attempts.listenerThrewAll(unended(from, to), error);
  }

  private List<DedupClaim> unended(int from, int to) {
    List<DedupClaim> unended = new ArrayList<>();
    for (int i = from; i < to; i++) {
      DedupClaim claim = claims.get(i);
      if (claim != null && !claim.isEnded()) {
        unended.add(claim);
      }
    }
    return unended;
  }
}
