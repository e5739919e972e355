package io.consumerdedup.core.internal;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupStore;
import java.time.Duration;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** Renews the leases of running handlers in the background, one daemon thread per executor. */
public final class LeaseRenewer implements AutoCloseable {
  private static final Logger log = LoggerFactory.getLogger(LeaseRenewer.class);
  private static final AtomicInteger THREADS = new AtomicInteger();

  private final DedupStore store;
  private final Duration lease;
  private final Duration interval;
  private final DedupListener listener;
  private final ScheduledExecutorService scheduler;

  public LeaseRenewer(DedupStore store, Duration lease, Duration interval, DedupListener listener) {
    this.store = store;
    this.lease = lease;
    this.interval = interval;
    this.listener = listener;
    ScheduledThreadPoolExecutor executor =
        new ScheduledThreadPoolExecutor(
            1,
            runnable -> {
              Thread thread =
                  new Thread(runnable, "consumer-dedup-lease-renewer-" + THREADS.incrementAndGet());
              thread.setDaemon(true);
              return thread;
            });
    // Cancelled renewals must not pile up in the queue of a busy consumer.
    executor.setRemoveOnCancelPolicy(true);
    this.scheduler = executor;
  }

  /**
   * Starts renewing the lease of {@code key} held with {@code token}, until {@link Renewal#stop()}.
   */
  public Renewal start(DedupKey key, int token) {
    Renewal renewal = new Renewal(key, token);
    renewal.future =
        scheduler.scheduleWithFixedDelay(
            renewal::renewOnce, interval.toNanos(), interval.toNanos(), TimeUnit.NANOSECONDS);
    return renewal;
  }

  @Override
  public void close() {
    scheduler.shutdownNow();
  }

  /** The renewal of one running handler's lease. */
  public final class Renewal {
    private final DedupKey key;
    private final int token;
    private volatile @Nullable ScheduledFuture<?> future;
    private volatile boolean stopped;
    private volatile boolean leaseLost;

    private Renewal(DedupKey key, int token) {
      this.key = key;
      this.token = token;
    }

    private void renewOnce() {
      if (stopped || leaseLost) {
        return;
      }
      try {
        boolean held = store.renew(key, token, lease);
        // A renewal that raced with the handler's completion finds the record no longer
        // PROCESSING; that is the normal end, not a lost lease.
        if (!held && !stopped) {
          leaseLost = true;
          log.warn(
              "Lease on {} (attempt {}) was taken over by another consumer while the handler ran",
              key,
              token);
          listener.leaseLost(key, token);
          cancel();
        }
      } catch (RuntimeException e) {
        // Keep trying: the lease lasts several intervals, and one failed renewal is not a loss.
        log.warn("Could not renew the lease on {} (attempt {}); will retry", key, token, e);
      }
    }

    /** Stops renewing; the handler has finished. */
    public void stop() {
      stopped = true;
      cancel();
    }

    /** Whether a renewal found the lease taken over (already reported to the listener). */
    public boolean leaseLost() {
      return leaseLost;
    }

    private void cancel() {
      ScheduledFuture<?> current = future;
      if (current != null) {
        current.cancel(false);
      }
    }
  }
}
