package io.consumerdedup.bench;

import static java.nio.charset.StandardCharsets.UTF_8;

import io.consumerdedup.bench.SpringListenerApp.ListenerHooks;
import java.io.PrintStream;
import java.lang.management.ManagementFactory;
import java.lang.management.MemoryMXBean;
import java.time.Duration;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.HexFormat;
import java.util.List;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.springframework.context.ConfigurableApplicationContext;

/**
 * Whether the heap grows with the records consumed, on the path users run most: V7's application, a
 * Spring Boot {@code @Idempotent} record listener at the defaults, in one run of {@code larger}
 * messages (5 % of them repeating an earlier key, as in the comparison). A producer thread sends
 * them as the listener consumes them, at most {@link #MAX_AHEAD} records ahead of it: the listener
 * runs at its own full rate from start to end (polls of up to 500 records, as in the comparison),
 * and at either measurement holds at most that many fetched records, which count as heap, instead
 * of a backlog whose size depends on how far it is from the end of the topic. When {@code smaller}
 * records are done and when all are, the consumer thread itself runs a full GC ({@link
 * MemoryMXBean#gc()}, twice) and reads the heap in use: {@code heap_growth} is the second over the
 * first.
 *
 * <p>Nothing of the harness grows with the records: the producer makes each key as it goes (no list
 * of them), the handler counts its runs and marks each order number in a bit set allocated up
 * front, enough to check that each key was applied once. The heap also holds the in-JVM broker and
 * what the comparison left; what does not grow cancels out of the difference, not of the ratio, so
 * the report gives both.
 */
final class HeapGrowth {
  /** How many records the producer sends ahead of those the listener is done with, at most. */
  static final int MAX_AHEAD = 1_000;

  private static final MemoryMXBean MEMORY = ManagementFactory.getMemoryMXBean();
  private static final Duration BASE_TIMEOUT = Duration.ofMinutes(2);
  private static final Duration TIMEOUT_PER_MESSAGE = Duration.ofMillis(20);

  /** Keeps this section's keys and their order the same from run to run. */
  private static final long SEED = 20_240_902;

  private HeapGrowth() {}

  /**
   * What the section measured.
   *
   * @param smaller records done at the first measurement
   * @param larger records done at the second, all of the run's
   * @param heapAtSmaller heap used after a full GC when {@code smaller} records were done
   * @param heapAtLarger heap used after a full GC when {@code larger} records were done
   * @param messagesPerSecond the listener's rate, from the first poll that returned records to the
   *     last record done (the two full GCs included)
   * @param problems what went wrong: records not consumed, or a handler count that is not one per
   *     key
   */
  record Result(
      int smaller,
      int larger,
      long heapAtSmaller,
      long heapAtLarger,
      double messagesPerSecond,
      List<String> problems) {

    /** Heap used after {@code larger} records over heap used after {@code smaller}. */
    double growth() {
      return (double) heapAtLarger / heapAtSmaller;
    }

    /** Heap gained per record between the two points, in bytes. */
    double bytesPerRecord() {
      return (double) (heapAtLarger - heapAtSmaller) / (larger - smaller);
    }
  }

  /**
   * Starts V7's application on an emptied dedup table and a new topic, sends {@code larger}
   * messages to it as it goes, and returns the heap at the two points.
   */
  static Result run(
      BenchBroker broker, BenchDatabase database, int smaller, int larger, PrintStream progress)
      throws Exception {
    String suffix = HexFormat.of().toHexDigits(ThreadLocalRandom.current().nextInt());
    String topic = "bench-memory-" + suffix;
    broker.createTopic(topic, BenchOptions.PARTITIONS);
    DedupTable.truncate(database);
    Probe probe = new Probe(larger);
    KeysApplied applied = new KeysApplied(larger);
    long[] heap = new long[2];
    ListenerHooks hooks =
        new ListenerHooks(
            probe,
            applied::apply,
            recordsDone -> {
              if (recordsDone == smaller) {
                heap[0] = heapAfterFullGc();
              } else if (recordsDone == larger) {
                heap[1] = heapAfterFullGc();
              }
            });
    progress.printf(
        "[bench] memory: V7's application over %,d messages, heap at %,d and %,d ...%n",
        larger, smaller, larger);
    PacedProducer producer = new PacedProducer(broker, topic, larger, probe);
    ExecutorService sending = Executors.newSingleThreadExecutor();
    Duration timeout = BASE_TIMEOUT.plus(TIMEOUT_PER_MESSAGE.multipliedBy(larger));
    int distinctKeys;
    try (ConfigurableApplicationContext application =
        SpringListenerApp.start(
            SpringListenerApp.IdempotentListener.class,
            true,
            hooks,
            broker.bootstrapServers(),
            database.url(),
            topic,
            "memory-" + suffix)) {
      Future<Integer> sent = sending.submit(producer::sendAll);
      distinctKeys = sent.get(timeout.toNanos(), TimeUnit.NANOSECONDS);
      probe.awaitAllDone(timeout);
    } finally {
      sending.shutdownNow();
    }
    List<String> problems = new ArrayList<>();
    if (probe.done() != larger) {
      problems.add("memory: consumed " + probe.done() + " of " + larger + " messages");
    }
    if (probe.deadLettered() > 0) {
      problems.add("memory: " + probe.deadLettered() + " listener calls failed");
    }
    if (applied.runs() != distinctKeys || applied.distinctKeys() != distinctKeys) {
      problems.add(
          "memory: the handler ran "
              + applied.runs()
              + " times for "
              + applied.distinctKeys()
              + " distinct keys, not once for each of "
              + distinctKeys);
    }
    Result result =
        new Result(
            smaller,
            larger,
            heap[0],
            heap[1],
            probe.done() * 1e9 / probe.elapsedNanos(),
            List.copyOf(problems));
    progress.printf(
        "[bench] memory: heap %.1f MB at %,d, %.1f MB at %,d: heap_growth %.2f%n",
        result.heapAtSmaller() / 1e6,
        smaller,
        result.heapAtLarger() / 1e6,
        larger,
        result.growth());
    return result;
  }

  /** Heap in use after a full collection; twice, so that what the first freed is gone too. */
  private static long heapAfterFullGc() {
    MEMORY.gc();
    MEMORY.gc();
    return MEMORY.getHeapMemoryUsage().getUsed();
  }

  /**
   * Sends the messages at most {@link #MAX_AHEAD} ahead of the records the probe has seen done,
   * round-robin on the partitions, each with its order number in the {@code order-no} header: a new
   * key, or for {@link BenchOptions#DUPLICATE_RATE} of them one sent before. It makes each key as
   * it goes, so that it holds nothing per message.
   */
  private static final class PacedProducer {
    private final BenchBroker broker;
    private final String topic;
    private final int messages;
    private final Probe probe;

    PacedProducer(BenchBroker broker, String topic, int messages, Probe probe) {
      this.broker = broker;
      this.topic = topic;
      this.messages = messages;
      this.probe = probe;
    }

    /**
     * Sends every message and returns the number of distinct keys sent.
     *
     * @throws IllegalStateException if a message could not be produced
     */
    int sendAll() throws InterruptedException {
      Random random = new Random(SEED);
      AtomicReference<Exception> firstFailure = new AtomicReference<>();
      int distinct = 0;
      try (KafkaProducer<String, String> producer = broker.producer()) {
        for (int i = 0; i < messages; i++) {
          while (i - probe.done() >= MAX_AHEAD) {
            TimeUnit.MILLISECONDS.sleep(1);
          }
          boolean repeat = distinct > 0 && random.nextDouble() < BenchOptions.DUPLICATE_RATE;
          String orderNo = Workload.orderNo(repeat ? random.nextInt(distinct) : distinct++);
          ProducerRecord<String, String> record =
              new ProducerRecord<>(
                  topic,
                  i % BenchOptions.PARTITIONS,
                  null,
                  Workload.value(orderNo, BenchOptions.VALUE_BYTES));
          record.headers().add(Workload.ORDER_NO_HEADER, orderNo.getBytes(UTF_8));
          producer.send(
              record,
              (metadata, exception) -> {
                if (exception != null) {
                  firstFailure.compareAndSet(null, exception);
                }
              });
        }
        producer.flush();
      }
      if (firstFailure.get() != null) {
        throw new IllegalStateException("Could not produce to " + topic, firstFailure.get());
      }
      return distinct;
    }
  }

  /**
   * The handler of this section: counts its runs and marks each order number in a bit set allocated
   * up front, so that it does not grow with the records.
   */
  private static final class KeysApplied {
    private final BitSet keys;
    private long runs;

    KeysApplied(int messages) {
      this.keys = new BitSet(messages);
    }

    void apply(ConsumerRecord<String, String> record) {
      keys.set(Workload.orderIndex(Workload.orderNo(record)));
      runs++;
    }

    long runs() {
      return runs;
    }

    int distinctKeys() {
      return keys.cardinality();
    }
  }
}
