package io.consumerdedup.bench;

import java.lang.management.ManagementFactory;
import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.HdrHistogram.Histogram;
import org.jspecify.annotations.Nullable;

/**
 * What one run measures, told by its consumer thread: when a poll returned records, when each
 * record was done (and whether its handler ran), each {@code commitSync}; and so the throughput,
 * the latency of each record from the return of its poll, and the process CPU time over the same
 * window, from the first poll that returned records to the last record done.
 *
 * <p>Written by the consumer thread only; read by others once {@link #awaitAllDone} returned or the
 * consumer thread ended.
 */
public final class Probe {
  private static final com.sun.management.OperatingSystemMXBean OS =
      (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();

  private final long expected;
  private final Histogram latencyMicros = new Histogram(3);
  private final CountDownLatch allDone = new CountDownLatch(1);

  private long lastPollReturnNanos;
  private long firstPollReturnNanos = -1;
  private long firstCpuNanos;
  private long lastDoneNanos;
  private long lastCpuNanos;
  private volatile long done;
  private volatile long deadLettered;
  private long applied;
  private long commitSyncs;
  private @Nullable Exception firstDeadLetterReason;

  /** A probe of a run that ends when {@code expected} records are done or dead-lettered. */
  public Probe(long expected) {
    this.expected = expected;
  }

  /** A poll has just returned records. */
  public void pollReturned() {
    long now = System.nanoTime();
    lastPollReturnNanos = now;
    if (firstPollReturnNanos < 0) {
      firstPollReturnNanos = now;
      firstCpuNanos = OS.getProcessCpuTime();
    }
  }

  /**
   * A record of the last poll is done.
   *
   * @param handlerRan true if its handler ran, false if it was skipped as a duplicate
   */
  public void recordDone(boolean handlerRan) {
    long now = System.nanoTime();
    latencyMicros.recordValue(Math.max(0, (now - lastPollReturnNanos) / 1_000));
    if (handlerRan) {
      applied++;
    }
    done++;
    endIfAllCounted(now);
  }

  /** A record went to the dead-letter handler: the run has failed, and ends early. */
  public void deadLettered(Exception reason) {
    if (firstDeadLetterReason == null) {
      firstDeadLetterReason = reason;
    }
    deadLettered++;
    endIfAllCounted(System.nanoTime());
  }

  /** The consumer committed offsets with {@code commitSync}. */
  public void commitSynced() {
    commitSyncs++;
  }

  private void endIfAllCounted(long now) {
    if (done + deadLettered == expected) {
      lastDoneNanos = now;
      lastCpuNanos = OS.getProcessCpuTime();
      allDone.countDown();
    }
  }

  /** True once every expected record is done or dead-lettered. */
  public boolean allDone() {
    return allDone.getCount() == 0;
  }

  /**
   * Waits until every expected record is done or dead-lettered.
   *
   * @throws TimeoutException if {@code timeout} passed first, saying how far the run got
   */
  public void awaitAllDone(Duration timeout) throws InterruptedException, TimeoutException {
    if (!allDone.await(timeout.toNanos(), TimeUnit.NANOSECONDS)) {
      throw new TimeoutException(
          "Only " + done + " of " + expected + " records were done after " + timeout);
    }
  }

  /** Records done (handled or skipped as duplicates). */
  public long done() {
    return done;
  }

  /** Records whose handler ran. */
  public long applied() {
    return applied;
  }

  /** Records given to the dead-letter handler; the benchmark's workload should have none. */
  public long deadLettered() {
    return deadLettered;
  }

  /** Why the first dead-lettered record was dead-lettered, if any was. */
  public @Nullable Exception firstDeadLetterReason() {
    return firstDeadLetterReason;
  }

  /** The consumer's {@code commitSync} calls. */
  public long commitSyncs() {
    return commitSyncs;
  }

  /** From the first poll that returned records to the last record done. */
  public long elapsedNanos() {
    return lastDoneNanos - firstPollReturnNanos;
  }

  /** CPU time of this JVM over {@link #elapsedNanos()}. */
  public long cpuNanos() {
    return lastCpuNanos - firstCpuNanos;
  }

  /** A copy of the latencies, in microseconds, from the return of a record's poll to its end. */
  public Histogram latencyMicros() {
    return latencyMicros.copy();
  }
}
