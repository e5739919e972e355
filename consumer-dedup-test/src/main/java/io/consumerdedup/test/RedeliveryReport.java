package io.consumerdedup.test;

import static java.nio.charset.StandardCharsets.UTF_8;

import io.consumerdedup.core.Disposition;
import io.consumerdedup.core.internal.FailureTexts;
import io.consumerdedup.kafka.RecordHandler;
import io.consumerdedup.kafka.RecordProcessor;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Redelivery testing: every record reaches the handler twice, the second copy after the first
 * completed (as Kafka delivers a record again after a rebalance, a crash or a lost commit), and
 * this report names every handler whose <em>body</em> (the application's work inside the dedup) ran
 * twice for one record: its dedup key does not identify the record's business action. A run that
 * threw is not one of the two: the retry after it is what a failure calls for.
 *
 * <p>For a plain kafka-clients loop, wrap the body with {@link #countBodyRuns} and the processor
 * with {@link #redeliverEachRecord}:
 *
 * <pre>{@code
 * RedeliveryReport report = new RedeliveryReport();
 * IdempotentRecordHandler<String, String> payments = IdempotentRecordHandler
 *     .<String, String>builder(executor)
 *     .bizType("payment")
 *     .key(KeyExtractors.header("order-no"))
 *     .handler(report.countBodyRuns("payments", record -> charge(record.value())))
 *     .build();
 * DedupPollLoop<String, String> loop =
 *     DedupPollLoop.builder(config, List.of("payments"), report.redeliverEachRecord(payments)).build();
 * ... // send records, run the loop until they are processed
 * report.assertNoBodyRanTwice();
 * }</pre>
 *
 * <p>In a Spring Boot test, {@link io.consumerdedup.test.spring.RedeliverEachRecord} does both for
 * every {@code @Idempotent} listener and makes this report a bean.
 *
 * <p>The second copy is the same record (same topic, partition, offset, key, headers and value); it
 * is delivered once the first copy's outcome is written (for a poll loop, after the poll's outcomes
 * are settled). A copy that fails is listed in {@link #failedRedeliveries()}, and fails {@link
 * #assertNoBodyRanTwice()}. Thread-safe.
 */
public final class RedeliveryReport {
  private static final Logger log = LoggerFactory.getLogger(RedeliveryReport.class);

  /** Which copy of a record is being delivered on this thread: 0 outside a redelivery test. */
  private final ThreadLocal<Integer> copy = ThreadLocal.withInitial(() -> 0);

  private final Map<RunKey, List<Run>> runs = new ConcurrentHashMap<>();
  private final Map<RunKey, String> recordKeys = new ConcurrentHashMap<>();
  private final List<String> failedRedeliveries = new CopyOnWriteArrayList<>();
  private final List<String> neverRedelivered = new CopyOnWriteArrayList<>();
  private final AtomicInteger redelivered = new AtomicInteger();
  private final AtomicInteger redeliveredWithoutFailing = new AtomicInteger();

  /**
   * One run of a handler body.
   *
   * @param copy 1 on the first delivery of the record, 2 on the redelivered copy, 0 if the body ran
   *     outside a delivery this report made
   * @param failure what the body threw, or null if it returned (or is still running)
   */
  public record BodyRun(int copy, String thread, Instant at, @Nullable String failure) {
    @Override
    public String toString() {
      return (copy == 1
              ? "on the first delivery"
              : copy == 2 ? "on the redelivered copy" : "outside the redelivery test")
          + " (thread "
          + thread
          + ", "
          + at
          + ")"
          + (failure == null ? "" : ", threw " + failure);
    }
  }

  /** A body run as it goes: whether it threw is known only once it ended. */
  private static final class Run {
    final int copy;
    final String thread;
    final Instant at;

    /**
     * Whether the run began while an earlier run of the same body for the record had not thrown:
     * that one returned, or still ran, so this run may apply the record's effect a second time. A
     * run after one that threw is the retry that a failure calls for, not a second application.
     */
    final boolean again;

    volatile @Nullable String failure;

    Run(int copy, boolean again) {
      this.copy = copy;
      this.thread = Thread.currentThread().getName();
      this.at = Instant.now();
      this.again = again;
    }

    BodyRun view() {
      return new BodyRun(copy, thread, at, failure);
    }
  }

  /**
   * The body runs of one listener for one record.
   *
   * @param listener the name the body was counted under (for Spring, {@code Class.method})
   * @param record the record as {@code topic-partition@offset}
   * @param recordKey the record's Kafka key, or null
   */
  public record RecordRuns(
      String listener, String record, @Nullable String recordKey, List<BodyRun> runs) {
    @Override
    public String toString() {
      StringBuilder text =
          new StringBuilder(listener)
              .append(" ran its body ")
              .append(runs.size())
              .append(" times for record ")
              .append(record);
      if (recordKey != null) {
        text.append(" (key '").append(recordKey).append("')");
      }
      text.append(':');
      for (int i = 0; i < runs.size(); i++) {
        text.append("\n      run ").append(i + 1).append(' ').append(runs.get(i));
      }
      return text.toString();
    }
  }

  private record RunKey(String listener, String topic, int partition, long offset) {}

  /**
   * Wraps a handler body so that each of its runs is counted under {@code listener} for the record
   * it ran for. Put the wrapper where the body runs inside the dedup: as the {@code handler} of an
   * {@code IdempotentRecordHandler}.
   */
  public <K, V> RecordHandler<K, V> countBodyRuns(String listener, RecordHandler<K, V> body) {
    Objects.requireNonNull(listener, "listener");
    Objects.requireNonNull(body, "body");
    return record -> {
      Run run = start(listener, record);
      try {
        body.handle(record);
      } catch (Exception | Error e) {
        run.failure = FailureTexts.describe(e);
        throw e;
      }
    };
  }

  /**
   * Wraps a poll loop's processor so that it is handed every record twice: each record it processed
   * without an exception is delivered again, as the same record, after the poll's outcomes are
   * settled (in a poll of its own, {@code prepare}, {@code process}, {@code settle}). Called
   * without {@code prepare}, the copy follows the first delivery at once.
   */
  public <K, V> RecordProcessor<K, V> redeliverEachRecord(RecordProcessor<K, V> processor) {
    return new RedeliveringProcessor<>(processor, this);
  }

  /**
   * Counts one run of {@code listener}'s body for {@code record}; for adapters that count body runs
   * themselves (the Spring support does).
   */
  public void bodyRan(String listener, ConsumerRecord<?, ?> record) {
    start(listener, record);
  }

  /**
   * Notes that the run of {@code listener}'s body that this thread last began for {@code record}
   * threw {@code error}: a later run for the record is then its retry, not a second application.
   * For adapters that count body runs themselves (the Spring support does).
   */
  public void bodyFailed(String listener, ConsumerRecord<?, ?> record, Throwable error) {
    List<Run> list = runs.get(runKey(listener, record));
    if (list == null) {
      return;
    }
    String thread = Thread.currentThread().getName();
    synchronized (list) {
      for (int i = list.size() - 1; i >= 0; i--) {
        Run run = list.get(i);
        if (run.thread.equals(thread)) {
          run.failure = FailureTexts.describe(error);
          return;
        }
      }
    }
  }

  private static RunKey runKey(String listener, ConsumerRecord<?, ?> record) {
    return new RunKey(listener, record.topic(), record.partition(), record.offset());
  }

  private Run start(String listener, ConsumerRecord<?, ?> record) {
    RunKey key = runKey(listener, record);
    List<Run> list = runs.computeIfAbsent(key, k -> new ArrayList<>());
    Run run;
    synchronized (list) {
      run = new Run(copy.get(), list.stream().anyMatch(earlier -> earlier.failure == null));
      list.add(run);
    }
    Object recordKey = record.key();
    if (recordKey != null) {
      String text =
          recordKey instanceof byte[] bytes ? new String(bytes, UTF_8) : recordKey.toString();
      recordKeys.putIfAbsent(key, text.length() <= 80 ? text : text.substring(0, 77) + "...");
    }
    return run;
  }

  /**
   * Delivers a record twice: {@code first}, then, if it returned, {@code second} as the redelivered
   * copy. A second copy that throws is listed in {@link #failedRedeliveries()} under {@code
   * description}, not rethrown: the first delivery's result stands. For adapters (the Spring
   * support uses it).
   *
   * @return what {@code first} returned
   * @throws Throwable what {@code first} threw (the copy is then not delivered)
   */
  public @Nullable Object deliverTwice(Delivery first, Delivery second, String description)
      throws Throwable {
    return deliverTwice(first, second, description, description);
  }

  /**
   * As {@link #deliverTwice(Delivery, Delivery, String)}; {@code record} names the record (such as
   * {@code topic-0@42}) in {@link #neverRedelivered()} if {@code first} throws what dead-letters
   * it.
   */
  public @Nullable Object deliverTwice(
      Delivery first, Delivery second, String description, String record) throws Throwable {
    Object result = asFirstDelivery(record, first);
    try {
      asCopy(2, second);
      copyCompleted();
    } catch (Throwable e) {
      redeliveryFailed(description, e);
    } finally {
      copyDelivered();
    }
    return result;
  }

  /** Runs {@code delivery} as copy {@code number} of its record. */
  @Nullable Object asCopy(int number, Delivery delivery) throws Throwable {
    int outer = copy.get();
    copy.set(number);
    try {
      return delivery.run();
    } finally {
      copy.set(outer);
    }
  }

  /**
   * Runs {@code delivery} as the first copy of {@code record}; if it throws what gives the record
   * up without a retry (a missing or malformed key: {@link Disposition#DEAD_LETTER}), notes that
   * the record is never redelivered, and why.
   */
  @Nullable Object asFirstDelivery(String record, Delivery delivery) throws Throwable {
    try {
      return asCopy(1, delivery);
    } catch (Throwable e) {
      if (Disposition.of(e) == Disposition.DEAD_LETTER) {
        // A test waiting until redeliveredCopies() counts this record's copy would wait in vain,
        // and time out saying only that the count was not reached.
        String why =
            record
                + ": its first delivery threw "
                + FailureTexts.describe(e)
                + ", so it is dead-lettered and never redelivered (redeliveredCopies() does not"
                + " count it)";
        neverRedelivered.add(why);
        log.warn("Not redelivering {}", why);
      }
      throw e;
    }
  }

  /** Counts a redelivered copy handed to a handler. */
  void copyDelivered() {
    redelivered.incrementAndGet();
  }

  /** Counts a redelivered copy that the handler took without failing. */
  void copyCompleted() {
    redeliveredWithoutFailing.incrementAndGet();
  }

  void redeliveryFailed(String description, Throwable error) {
    failedRedeliveries.add(description + ": " + FailureTexts.describe(error));
  }

  /** A delivery of a record to a handler. */
  @FunctionalInterface
  public interface Delivery {
    @Nullable Object run() throws Throwable;
  }

  /**
   * The listeners whose body ran again for one record after a run that did not throw, with all
   * their runs for it. Runs after runs that threw are the retries of a failure, not counted here.
   */
  public List<RecordRuns> bodiesRunTwice() {
    List<RecordRuns> twice = new ArrayList<>();
    runs.forEach(
        (key, list) -> {
          List<BodyRun> copyOfRuns;
          boolean again;
          synchronized (list) {
            copyOfRuns = list.stream().map(Run::view).toList();
            again = list.stream().anyMatch(run -> run.again);
          }
          if (again) {
            twice.add(
                new RecordRuns(
                    key.listener(),
                    key.topic() + "-" + key.partition() + "@" + key.offset(),
                    recordKeys.get(key),
                    copyOfRuns));
          }
        });
    twice.sort(Comparator.comparing(RecordRuns::listener).thenComparing(RecordRuns::record));
    return twice;
  }

  /** How many body runs were counted, of every listener. */
  public int bodyRuns() {
    return runs.values().stream()
        .mapToInt(
            list -> {
              synchronized (list) {
                return list.size();
              }
            })
        .sum();
  }

  /** How many redelivered copies were handed to a handler (whether or not its body ran). */
  public int redeliveredCopies() {
    return redelivered.get();
  }

  /** The redelivered copies that threw, each with what it threw. */
  public List<String> failedRedeliveries() {
    return List.copyOf(failedRedeliveries);
  }

  /**
   * The records given up on their first delivery without a retry (dead-lettered: a missing or
   * malformed key), which are never redelivered, each with what its delivery threw.
   */
  public List<String> neverRedelivered() {
    return List.copyOf(neverRedelivered);
  }

  /**
   * Fails if any listener's body ran twice for one record, naming each such listener, the record
   * and both runs; and fails if the test did not test redelivery: no copy was redelivered, no body
   * run was counted, or a redelivered copy failed (every one, or some: their records' redelivery
   * was not tested).
   *
   * @throws AssertionError if a body ran twice, or if a redelivery was not tested
   */
  public void assertNoBodyRanTwice() {
    List<RecordRuns> twice = bodiesRunTwice();
    if (!twice.isEmpty()) {
      StringBuilder message =
          new StringBuilder()
              .append(twice.size())
              .append(twice.size() == 1 ? " record was" : " records were")
              .append(" processed twice: the body ran again when the record was redelivered, so")
              .append(" the dedup key does not identify the record's business action (a key that")
              .append(" changes between deliveries?)");
      twice.forEach(runsOfRecord -> message.append("\n  ").append(runsOfRecord));
      if (!failedRedeliveries.isEmpty()) {
        message.append("\n  Redelivered copies that failed: ").append(failedRedeliveries);
      }
      throw new AssertionError(message.toString());
    }
    // A body that did not run twice proves nothing unless a copy reached the dedup as a duplicate.
    int copies = redeliveredCopies();
    if (copies == 0) {
      throw new AssertionError(
          "No record was redelivered, so this test did not test redelivery: were the records"
              + " processed before this assertion (wait until redeliveredCopies() counts them), and"
              + " does the test redeliver (@RedeliverEachRecord on the test class, or the poll"
              + " loop's processor wrapped with redeliverEachRecord)? "
              + this);
    }
    if (redeliveredWithoutFailing.get() == 0) {
      throw new AssertionError(
          "Every redelivered copy failed ("
              + copies
              + (copies == 1 ? " copy" : " copies")
              + "), so none was taken as a duplicate and this test did not show that a"
              + " redelivered record is skipped: "
              + failedRedeliveries);
    }
    if (bodyRuns() == 0) {
      throw new AssertionError(
          copies
              + (copies == 1 ? " copy was" : " copies were")
              + " redelivered but no body run was counted, so a body that ran twice would not"
              + " have been seen: wrap the handler with countBodyRuns (batch listeners of"
              + " payloads are not counted), and check that the records' keys were not already processed before"
              + " the test. "
              + this);
    }
    // A copy that failed showed nothing about its record: in production that redelivery would be
    // retried or dead-lettered, not skipped, and its listener may be one whose every copy failed.
    int failed = copies - redeliveredWithoutFailing.get();
    if (failed > 0) {
      throw new AssertionError(
          failed
              + " of "
              + copies
              + " redelivered copies failed, so their records were not shown to be skipped when"
              + " Kafka delivers them again: "
              + failedRedeliveries);
    }
  }

  /** Forgets every count, for the next test on the same report. */
  public void reset() {
    runs.clear();
    recordKeys.clear();
    failedRedeliveries.clear();
    neverRedelivered.clear();
    redelivered.set(0);
    redeliveredWithoutFailing.set(0);
  }

  @Override
  public String toString() {
    return "RedeliveryReport{bodyRuns="
        + bodyRuns()
        + ", redeliveredCopies="
        + redeliveredCopies()
        + ", bodiesRunTwice="
        + bodiesRunTwice().size()
        + ", failedRedeliveries="
        + failedRedeliveries.size()
        + (neverRedelivered.isEmpty() ? "" : ", neverRedelivered=" + neverRedelivered)
        + "}";
  }
}
