package io.consumerdedup.bench;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.IdempotentExecutor;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.HdrHistogram.Histogram;

/**
 * A steady stream of claims of new keys, one at a time on a thread of its own, while something else
 * happens; records how long each claim's round trip took, as the engine times it ({@link
 * DedupListener#claimTimed}). Give it to the executor as its listener.
 */
final class ClaimLoad implements DedupListener {
  private final AtomicLong keys = new AtomicLong();
  private volatile Histogram claimMicros = new Histogram(3);

  @Override
  public void claimTimed(DedupKey key, Duration elapsed) {
    claimMicros.recordValue(elapsed.toNanos() / 1_000);
  }

  /** Something to do while claims run. */
  @FunctionalInterface
  interface Work {
    void run() throws Exception;
  }

  /**
   * Claims, runs a no-op handler and completes new keys through {@code executor} until {@code work}
   * returns; returns the claims' round trips, in microseconds.
   *
   * @throws IllegalStateException if a claim failed
   */
  Histogram whileRunning(IdempotentExecutor executor, Work work) throws Exception {
    Histogram histogram = new Histogram(3);
    claimMicros = histogram;
    AtomicBoolean stop = new AtomicBoolean();
    AtomicReference<RuntimeException> failure = new AtomicReference<>();
    Thread claimer =
        new Thread(
            () -> {
              try {
                while (!stop.get()) {
                  DedupKey key =
                      DedupKey.of(DedupTable.BIZ_TYPE, "claim-load-" + keys.incrementAndGet());
                  executor.execute(key, () -> null);
                }
              } catch (RuntimeException e) {
                failure.set(e);
              }
            },
            "bench-claim-load");
    claimer.start();
    try {
      work.run();
    } finally {
      stop.set(true);
      claimer.join();
    }
    if (failure.get() != null) {
      throw new IllegalStateException("A claim of the load failed", failure.get());
    }
    return histogram;
  }
}
