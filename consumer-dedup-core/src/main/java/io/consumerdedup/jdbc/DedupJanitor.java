package io.consumerdedup.jdbc;

import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.internal.Durations;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Deletes records whose retention has passed, in bounded batches, so the dedup table stays bounded.
 * Safe to run on every instance at once: batches skip rows another janitor (or a claim) has locked.
 *
 * <pre>{@code
 * DedupJanitor janitor = DedupJanitor.builder(store).interval(Duration.ofMinutes(10)).build();
 * janitor.start();   // ... janitor.close() on shutdown
 * }</pre>
 */
public final class DedupJanitor implements AutoCloseable {

  /** Default number of rows deleted per statement. */
  public static final int DEFAULT_BATCH_SIZE = 1000;

  /** Default most batches in one run, so one run never holds the database for long. */
  public static final int DEFAULT_MAX_BATCHES_PER_RUN = 100;

  /** Default time between runs. */
  public static final Duration DEFAULT_INTERVAL = Duration.ofMinutes(10);

  private static final Logger log = LoggerFactory.getLogger(DedupJanitor.class);

  private final DedupStore store;
  private final int batchSize;
  private final int maxBatchesPerRun;
  private final Duration interval;
  private final DedupListener listener;
  private @Nullable ScheduledExecutorService scheduler;

  private DedupJanitor(Builder builder) {
    this.store = builder.store;
    this.batchSize = builder.batchSize;
    this.maxBatchesPerRun = builder.maxBatchesPerRun;
    this.interval = builder.interval;
    this.listener = DedupListener.composite(List.of(builder.listener));
  }

  public static Builder builder(DedupStore store) {
    return new Builder(store);
  }

  /**
   * Deletes expired records now, batch after batch, until a batch comes back short or the per-run
   * limit is reached.
   *
   * @return how many records were deleted
   */
  public int purgeExpired() {
    int total = 0;
    for (int batch = 0; batch < maxBatchesPerRun; batch++) {
      int deleted = store.purge(batchSize);
      total += deleted;
      if (deleted < batchSize) {
        break;
      }
    }
    if (total > 0) {
      log.info("Purged {} expired dedup records", total);
      listener.purged(total);
    }
    return total;
  }

  /**
   * Runs {@link #purgeExpired()} every {@code interval} on a daemon thread, until {@link #close()}.
   */
  public synchronized void start() {
    if (scheduler != null) {
      throw new IllegalStateException("DedupJanitor already started");
    }
    ScheduledExecutorService started =
        Executors.newSingleThreadScheduledExecutor(
            runnable -> {
              Thread thread = new Thread(runnable, "consumer-dedup-janitor");
              thread.setDaemon(true);
              return thread;
            });
    // purgeQuietly catches what a run throws, and stop() shuts the scheduler down: the future
    // has nothing to tell.
    var unused =
        started.scheduleWithFixedDelay(
            this::purgeQuietly, interval.toMillis(), interval.toMillis(), TimeUnit.MILLISECONDS);
    scheduler = started;
  }

  private void purgeQuietly() {
    try {
      purgeExpired();
    } catch (RuntimeException e) {
      // The next run tries again; a failed purge only delays the cleanup.
      log.warn("Purge of expired dedup records failed; next try in {}", interval, e);
    }
  }

  /** Stops the scheduled runs, if started; a batch in flight finishes. */
  @Override
  public synchronized void close() {
    if (scheduler != null) {
      scheduler.shutdown();
      scheduler = null;
    }
  }

  /** Builds a {@link DedupJanitor}. */
  public static final class Builder {
    private final DedupStore store;
    private int batchSize = DEFAULT_BATCH_SIZE;
    private int maxBatchesPerRun = DEFAULT_MAX_BATCHES_PER_RUN;
    private Duration interval = DEFAULT_INTERVAL;
    private DedupListener listener = DedupListener.NOOP;

    private Builder(DedupStore store) {
      this.store = Objects.requireNonNull(store, "store");
    }

    /** Rows deleted per statement. Default {@value #DEFAULT_BATCH_SIZE}. */
    public Builder batchSize(int batchSize) {
      if (batchSize < 1) {
        throw new IllegalArgumentException("batchSize must be at least 1, was " + batchSize);
      }
      this.batchSize = batchSize;
      return this;
    }

    /** Most batches per run. Default {@value #DEFAULT_MAX_BATCHES_PER_RUN}. */
    public Builder maxBatchesPerRun(int maxBatchesPerRun) {
      if (maxBatchesPerRun < 1) {
        throw new IllegalArgumentException(
            "maxBatchesPerRun must be at least 1, was " + maxBatchesPerRun);
      }
      this.maxBatchesPerRun = maxBatchesPerRun;
      return this;
    }

    /** Time between runs once started. Default {@link #DEFAULT_INTERVAL}. */
    public Builder interval(Duration interval) {
      this.interval = Durations.requirePositive("interval", interval);
      return this;
    }

    /** Receives {@link DedupListener#purged(int)}. */
    public Builder listener(DedupListener listener) {
      this.listener = Objects.requireNonNull(listener, "listener");
      return this;
    }

    public DedupJanitor build() {
      return new DedupJanitor(this);
    }
  }
}
