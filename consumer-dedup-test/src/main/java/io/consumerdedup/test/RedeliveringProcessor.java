package io.consumerdedup.test;

import io.consumerdedup.core.Outcome;
import io.consumerdedup.kafka.RecordProcessor;
import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Objects;
import java.util.OptionalInt;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;

/**
 * A poll loop's processor that is handed every record twice (see {@link
 * RedeliveryReport#redeliverEachRecord}): the records of a poll that were processed are delivered
 * again, as a poll of their own, once the first poll's outcomes are settled.
 */
final class RedeliveringProcessor<K, V> implements RecordProcessor<K, V> {
  private final RecordProcessor<K, V> delegate;
  private final RedeliveryReport report;

  /** The current poll, per loop thread; null outside a poll. */
  @SuppressWarnings("ThreadLocalUsage") // per processor on purpose: its own poll, per loop thread
  private final ThreadLocal<@Nullable Poll<K, V>> processed = new ThreadLocal<>();

  /**
   * A poll's records that were processed, and the copy of each, taken before its first delivery: a
   * handler may change the record's arrays, which a real redelivery deserializes anew.
   */
  private static final class Poll<K, V> {
    final IdentityHashMap<ConsumerRecord<K, V>, ConsumerRecord<K, V>> copies =
        new IdentityHashMap<>();
    final List<ConsumerRecord<K, V>> processed = new ArrayList<>();

    void copy(ConsumerRecord<K, V> record) {
      copies.computeIfAbsent(record, RedeliveredCopies::of);
    }
  }

  RedeliveringProcessor(RecordProcessor<K, V> delegate, RedeliveryReport report) {
    this.delegate = Objects.requireNonNull(delegate, "processor");
    this.report = report;
  }

  @Override
  public void prepare(List<ConsumerRecord<K, V>> records) {
    Poll<K, V> poll = new Poll<>();
    records.forEach(poll::copy);
    processed.set(poll);
    // As the first delivery: a processor may run the poll's handlers here
    // (JdbcTransactionalProcessor
    // runs the whole poll in one transaction), and their runs are the records' first.
    passOn(
        () ->
            report.asCopy(
                1,
                () -> {
                  delegate.prepare(records);
                  return null;
                }));
  }

  @Override
  public Outcome process(ConsumerRecord<K, V> record) {
    Poll<K, V> poll = processed.get();
    if (poll == null) {
      ConsumerRecord<K, V> copy = copyOf(record);
      return outcome(
          () ->
              report.deliverTwice(
                  () -> delegate.process(record),
                  () -> delegate.process(copy),
                  describe(record),
                  name(record)));
    }
    poll.copy(record);
    Outcome outcome =
        outcome(() -> report.asFirstDelivery(name(record), () -> delegate.process(record)));
    poll.processed.add(record);
    return outcome;
  }

  @Override
  public List<ConsumerRecord<K, V>> settle() {
    Poll<K, V> poll = processed.get();
    processed.remove();
    List<ConsumerRecord<K, V>> unrecorded = delegate.settle();
    if (poll == null || poll.processed.isEmpty()) {
      return unrecorded;
    }
    Set<ConsumerRecord<K, V>> notWritten = Collections.newSetFromMap(new IdentityHashMap<>());
    notWritten.addAll(unrecorded);
    List<ConsumerRecord<K, V>> copies =
        poll.processed.stream()
            .filter(record -> !notWritten.contains(record))
            .map(record -> Objects.requireNonNull(poll.copies.get(record)))
            .toList();
    redeliver(copies);
    return unrecorded;
  }

  /** Delivers the copies as a poll of their own; what they throw goes to the report. */
  private void redeliver(List<ConsumerRecord<K, V>> copies) {
    if (copies.isEmpty()) {
      return;
    }
    Set<ConsumerRecord<K, V>> completed = Collections.newSetFromMap(new IdentityHashMap<>());
    try {
      report.asCopy(
          2,
          () -> {
            delegate.prepare(copies);
            try {
              for (ConsumerRecord<K, V> copy : copies) {
                try {
                  delegate.process(copy);
                  completed.add(copy);
                } catch (RuntimeException | Error e) {
                  // An Error too (a test double's AssertionError): the copies after it are still
                  // delivered and counted, and the assertion names it, or the test waited for
                  // copies that never came.
                  report.redeliveryFailed(describe(copy), e);
                }
              }
            } finally {
              for (ConsumerRecord<K, V> copy : delegate.settle()) {
                completed.remove(copy);
                report.redeliveryFailed(describe(copy), new IllegalStateException("not settled"));
              }
            }
            return null;
          });
    } catch (Throwable e) {
      completed.clear();
      report.redeliveryFailed("redelivered poll of " + copies.size() + " records", e);
    }
    // Counted once the poll's outcomes are settled, those that completed first: a test that waits
    // for redeliveredCopies() to count them, as the report asks, read them while the copies' marks
    // were still being written and saw every copy failed.
    completed.forEach(copy -> report.copyCompleted());
    copies.forEach(copy -> report.copyDelivered());
  }

  @Override
  public OptionalInt attempts(ConsumerRecord<K, V> record) {
    return delegate.attempts(record);
  }

  /**
   * The same record as a new object: the processor must not take it for the first copy. Its bytes
   * are new arrays, as a redelivery deserializes them ({@link RedeliveredCopies}); taken before the
   * first delivery, whose handler may change them.
   */
  private ConsumerRecord<K, V> copyOf(ConsumerRecord<K, V> record) {
    return RedeliveredCopies.of(record);
  }

  private static String describe(ConsumerRecord<?, ?> record) {
    return "copy of " + name(record);
  }

  private static String name(ConsumerRecord<?, ?> record) {
    return record.topic() + "-" + record.partition() + "@" + record.offset();
  }

  /** Runs a delivery, passing on what the processor throws as itself. */
  private static Outcome outcome(RedeliveryReport.Delivery delivery) {
    return (Outcome) Objects.requireNonNull(passOn(delivery), "the processor returned no outcome");
  }

  /** Runs {@code delivery}, passing on what the processor throws as itself. */
  private static @Nullable Object passOn(RedeliveryReport.Delivery delivery) {
    try {
      return delivery.run();
    } catch (RuntimeException | Error e) {
      throw e;
    } catch (Throwable e) {
      throw new IllegalStateException(e);
    }
  }
}
