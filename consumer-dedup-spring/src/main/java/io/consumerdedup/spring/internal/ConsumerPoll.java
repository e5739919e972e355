package io.consumerdedup.spring.internal;

import io.consumerdedup.core.internal.FaultPoints;
import io.consumerdedup.core.internal.FirstFailure;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.IdentityHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Function;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.common.TopicPartition;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What one consumer ({@link PollAwareConsumer}) knows of the poll it returned last, for the {@code
 * Idempotent} record listeners its container calls: the poll's records in the order the container
 * hands them over, so that a listener claims the keys of all of them at its first; the claims each
 * listener made, given back when they are not to be used (the poll ended, a listener call failed, a
 * partition was revoked, the consumer closed); the SUCCESS marks its commits wait for ({@link
 * SuccessMarks}); and the records whose listener call failed lately, which are claimed alone when
 * they come again rather than with a whole poll that the next failure would give back again.
 *
 * <p>Used on the consumer thread, except {@link #marks()}, which an asynchronous listener's thread
 * may add to.
 *
 * <p>A share listener's worker makes one for each batch of records it processes ({@link
 * #ofShareBatch}), on the worker's thread: its listener calls claim the batch's keys together as
 * those of a poll, and {@link #endShareBatch} gives back the claims not used and tells which
 * records' SUCCESS is not written. A failed call does not give back the other claims of a batch:
 * the worker goes on with the next record, and the batch's end gives back what was not used.
 */
public final class ConsumerPoll {
  private static final Logger log = LoggerFactory.getLogger(ConsumerPoll.class);

  /** A bound on the failed records remembered: a few per partition is what a consumer sees. */
  private static final int MAX_FAILED = 1024;

  /** One listener's claims for the poll. */
  public interface Claims {
    /** Gives back the claims whose listener has not run; none is used afterwards. */
    void release();
  }

  private final SuccessMarks marks = new SuccessMarks();
  private ConsumerRecords<?, ?> records = ConsumerRecords.empty();
  private @Nullable List<ConsumerRecord<?, ?>> ordered;
  private @Nullable Map<Coordinates, Integer> positions;

  /** By listener; identity, as each listener is one object for the life of the application. */
  private final Map<Object, Claims> claims = new IdentityHashMap<>();

  private final Set<Coordinates> failed = new LinkedHashSet<>();

  /** Whether this poll's listeners have waited for the marks of the polls before. */
  private boolean earlierMarksAwaited;

  /** Whether this is a share listener's batch ({@link #ofShareBatch}). */
  private final boolean shareBatch;

  public ConsumerPoll() {
    this.shareBatch = false;
  }

  private ConsumerPoll(List<? extends ConsumerRecord<?, ?>> batch) {
    this.shareBatch = true;
    List<ConsumerRecord<?, ?>> list = new ArrayList<>(batch);
    Map<Coordinates, Integer> index = new HashMap<>();
    for (int i = 0; i < list.size(); i++) {
      index.putIfAbsent(Coordinates.of(list.get(i)), i);
    }
    ordered = list;
    positions = index;
  }

  /**
   * The records a share listener's worker processes together, in the order it calls the listener
   * with them; used on the worker's thread only, until {@link #endShareBatch}.
   */
  public static ConsumerPoll ofShareBatch(List<? extends ConsumerRecord<?, ?>> records) {
    return new ConsumerPoll(records);
  }

  /**
   * The share batch is over: gives back the claims its listener calls did not use (without counting
   * an attempt), then waits for the SUCCESS marks of its records, each at most its wait.
   *
   * @return where the records are whose SUCCESS is not written: they must not be acknowledged
   */
  public Set<Coordinates> endShareBatch() {
    try {
      releaseClaims();
    } finally {
      claims.clear();
    }
    return marks.awaitUnwritten();
  }

  /**
   * The listener call for {@code record} threw {@code error}: the record is remembered as failed
   * lately, and the claims of the poll the listener did not use are given back (the container does
   * not go on with the poll: its error handler seeks the records after this one back, or an Error
   * stops it). A share batch keeps them for its next records, unless an Error stops its worker; its
   * end gives back the rest. An {@code Error} giving them back is added to {@code error}.
   */
  public void listenerFailed(ConsumerRecord<?, ?> record, Throwable error) {
    failed(record);
    if (!shareBatch || error instanceof Error) {
      try {
        releaseClaims();
      } catch (Error e) {
        // What the listener threw goes on: the container's retry and dead-letter decisions read it
        // (an OutOfMemoryError recording this one must not take its place).
        FirstFailure.of(error, e);
      }
    }
  }

  public SuccessMarks marks() {
    return marks;
  }

  /** The consumer returned {@code polled}. */
  void started(ConsumerRecords<?, ?> polled) {
    records = polled;
    ordered = null;
    positions = null;
    earlierMarksAwaited = false;
  }

  /**
   * Waits, once per poll, until the SUCCESS marks of the polls before are written, before this
   * poll's first listener runs: a process that dies then re-runs records of the poll in hand only.
   * The caller has claimed the poll's keys first, so that the claim and the marks are on their way
   * together.
   */
  public void awaitEarlierMarks() {
    if (earlierMarksAwaited) {
      return;
    }
    earlierMarksAwaited = true;
    if (marks.awaitAll()) {
      // For the fault-injection suite: the marks of the records of the polls before are durable,
      // and the commit that passes them (the container's next) is not sent yet.
      FaultPoints.reached(FaultPoints.Point.BEFORE_OFFSET_COMMIT);
    }
  }

  /**
   * The poll is over (the consumer polls again, or closes): the claims whose listener never ran are
   * given back, before a record of them can come again in the next poll and find its key PROCESSING
   * under this very consumer's lease.
   */
  void ended() {
    try {
      releaseClaims();
    } finally {
      claims.clear();
      records = ConsumerRecords.empty();
      ordered = null;
      positions = null;
    }
  }

  /**
   * The records of this poll from {@code record} on, in the order the container hands a record
   * listener a poll's records; empty if {@code record} is not one of this poll (a record the
   * container kept from an earlier poll).
   */
  public List<ConsumerRecord<?, ?>> recordsFrom(ConsumerRecord<?, ?> record) {
    if (ordered == null || positions == null) {
      List<ConsumerRecord<?, ?>> list = new ArrayList<>(records.count());
      Map<Coordinates, Integer> index = new HashMap<>();
      for (ConsumerRecord<?, ?> polled : records) {
        index.put(Coordinates.of(polled), list.size());
        list.add(polled);
      }
      ordered = list;
      positions = index;
    }
    Integer position = positions.get(Coordinates.of(record));
    return position == null ? List.of() : ordered.subList(position, ordered.size());
  }

  /** {@code listener}'s claims for this poll, made by {@code claim} at its first record. */
  @SuppressWarnings("unchecked")
  public <T extends Claims> T claims(Object listener, Function<Object, T> claim) {
    return (T) claims.computeIfAbsent(listener, claim);
  }

  /**
   * Gives back every listener's unused claims of this poll; later records claim one by one. Never
   * throws but an {@code Error}, once every listener's claims were tried (the first, with the
   * others suppressed): it runs where the container does not expect consumer-dedup to fail
   * (polling, clearing the thread's state), and a claim not given back only waits for its lease.
   */
  public void releaseClaims() {
    if (claims.isEmpty()) {
      return;
    }
    Error error = null;
    // Kept, released: a later record of the poll is then claimed alone, not the poll again.
    for (Claims listenerClaims : new ArrayList<>(claims.values())) {
      try {
        listenerClaims.release();
      } catch (RuntimeException e) {
        // The store's own failures are logged by it; each listener's claims are tried anyway.
        log.warn("Could not give back the unused claims of a poll; their leases run out", e);
      } catch (Error e) {
        // Such as an OutOfMemoryError: thrown at once, it left the other listeners' claims held,
        // their records told "in progress" by this very consumer until their leases ran out.
        error = FirstFailure.of(error, e);
      }
    }
    if (error != null) {
      throw error;
    }
  }

  /** Whether {@code record}'s listener call failed lately: it is then claimed on its own. */
  public boolean failedLately(ConsumerRecord<?, ?> record) {
    return !failed.isEmpty() && failed.contains(Coordinates.of(record));
  }

  /** {@code record}'s listener call failed; the container delivers it again or gives it up. */
  public void failed(ConsumerRecord<?, ?> record) {
    if (failed.size() >= MAX_FAILED) {
      failed.remove(failed.iterator().next());
    }
    failed.add(Coordinates.of(record));
  }

  /** {@code record} is done. */
  public void done(ConsumerRecord<?, ?> record) {
    if (!failed.isEmpty()) {
      failed.remove(Coordinates.of(record));
    }
  }

  /** The partitions are no longer this consumer's: their claims, marks and failures go. */
  void revoked(Collection<TopicPartition> partitions) {
    if (partitions.isEmpty()) {
      return;
    }
    Set<TopicPartition> gone = new HashSet<>(partitions);
    failed.removeIf(coordinates -> gone.contains(coordinates.topicPartition()));
    marks.forget(gone);
    boolean holds = false;
    for (ConsumerRecord<?, ?> record : records) {
      if (gone.contains(new TopicPartition(record.topic(), record.partition()))) {
        holds = true;
        break;
      }
    }
    if (holds) {
      releaseClaims();
    }
  }
}
