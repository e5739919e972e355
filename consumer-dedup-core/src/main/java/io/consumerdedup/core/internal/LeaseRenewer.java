package io.consumerdedup.core.internal;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupStore;
import java.time.Duration;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Renews the leases of running handlers in the background. One timer thread decides when; the store
 * calls run on worker threads of their own, so one renewal stuck on a connection that stopped
 * answering (until the store's network timeout) never delays the renewals of other keys, and a
 * second renewal of the same key goes ahead on another connection meanwhile.
 */
public final class LeaseRenewer implements AutoCloseable {
  private static final Logger log = LoggerFactory.getLogger(LeaseRenewer.class);
  private static final AtomicInteger THREADS = new AtomicInteger();

  /** One renewal may hang on a dead connection; the next one must still get through. */
  private static final int MAX_RENEWALS_IN_FLIGHT = 2;

  private final DedupStore store;
  private final Duration lease;
  private final Duration interval;
  private final DedupListener listener;
  private final ScheduledThreadPoolExecutor timer;
  private final ExecutorService workers;

  public LeaseRenewer(DedupStore store, Duration lease, Duration interval, DedupListener listener) {
    this.store = store;
    this.lease = lease;
    this.interval = interval;
    this.listener = listener;
    this.timer = new ScheduledThreadPoolExecutor(1, daemon("consumer-dedup-lease-timer-"));
    // Cancelled renewals must not pile up in the queue of a busy consumer.
    this.timer.setRemoveOnCancelPolicy(true);
    // As many workers as renewals in flight, which is at most the number of keys held at once.
    this.workers =
        new ThreadPoolExecutor(
            0,
            Integer.MAX_VALUE,
            30,
            TimeUnit.SECONDS,
            new SynchronousQueue<>(),
            daemon("consumer-dedup-lease-renewer-"));
  }

  private static java.util.concurrent.ThreadFactory daemon(String prefix) {
    return runnable -> {
      Thread thread = new Thread(runnable, prefix + THREADS.incrementAndGet());
      thread.setDaemon(true);
      return thread;
    };
  }

  /**
   * Starts renewing the lease of {@code key} held with {@code token}, until {@link Renewal#stop()}.
   *
   * @param claimSentNanos {@link System#nanoTime()} just before the claim was sent: the lease runs
   *     from a moment after it, so it is surely held until this plus the lease
   */
  public Renewal start(DedupKey key, int token, long claimSentNanos) {
    Renewal renewal = new Renewal(key, token, claimSentNanos + lease.toNanos());
    renewal.future =
        timer.scheduleWithFixedDelay(
            renewal::tick, interval.toNanos(), interval.toNanos(), TimeUnit.NANOSECONDS);
    return renewal;
  }

  /** Runs {@code task} every {@code period} on a worker, until the returned future is cancelled. */
  ScheduledFuture<?> repeat(Runnable task, Duration period) {
    return timer.scheduleWithFixedDelay(
        () -> submit(task), period.toNanos(), period.toNanos(), TimeUnit.NANOSECONDS);
  }

  private boolean submit(Runnable task) {
    try {
      workers.execute(task);
      return true;
    } catch (RejectedExecutionException e) {
      return false; // closed
    }
  }

  @Override
  public void close() {
    timer.shutdownNow();
    workers.shutdownNow();
  }

  /** The renewal of one held lease. */
  public final class Renewal {
    private final DedupKey key;
    private final int token;
    private final AtomicInteger inFlight = new AtomicInteger();
    private volatile long heldUntilNanos;
    private volatile @Nullable ScheduledFuture<?> future;
    private volatile boolean stopped;
    private volatile boolean settling;
    private volatile boolean lost;

    private Renewal(DedupKey key, int token, long heldUntilNanos) {
      this.key = key;
      this.token = token;
      this.heldUntilNanos = heldUntilNanos;
    }

    private void tick() {
      if (stopped || lost) {
        return;
      }
      if (inFlight.incrementAndGet() > MAX_RENEWALS_IN_FLIGHT || !submit(this::renewOnce)) {
        inFlight.decrementAndGet(); // earlier renewals are still waiting for the database
      }
    }

    private void renewOnce() {
      long sent = System.nanoTime();
      try {
        if (store.renew(key, token, lease)) {
          long until = sent + lease.toNanos();
          if (until - heldUntilNanos > 0) {
            heldUntilNanos = until; // renewals may finish out of order
          }
        } else if (!stopped && !settling) {
          // While the outcome is being written, a refused renewal may just mean it was written;
          // the outcome's own fenced write tells the difference and reports a loss.
          markLost();
          log.warn(
              "Lease on {} (attempt {}) was taken over by another consumer while the handler ran",
              key,
              token);
          listener.leaseLost(key, token);
        }
      } catch (RuntimeException e) {
        // Keep trying: the lease lasts several intervals, and one failed renewal is not a loss.
        log.warn("Could not renew the lease on {} (attempt {}); will retry", key, token, e);
      } finally {
        inFlight.decrementAndGet();
      }
    }

    /**
     * The outcome is about to be written: from now on a refused renewal is the outcome writer's to
     * interpret. Renewal goes on until {@link #stop()}, so a write that has to be retried keeps the
     * lease.
     */
    public void settling() {
      settling = true;
    }

    /** Stops renewing: the outcome was written, or the lease is gone. */
    public void stop() {
      stopped = true;
      cancel();
    }

    /** A fenced write was refused: another consumer holds the key now. */
    public void markLost() {
      lost = true;
      cancel();
    }

    /** Whether a renewal or a fenced write found the lease taken over. */
    public boolean isTakenOver() {
      return lost;
    }

    /**
     * Whether the lease may be gone: taken over, or not renewed within a lease period (measured
     * from before the last successful renewal was sent, so never later than the database's own
     * expiry). Once true, another consumer may take the key over and run its handler.
     */
    public boolean isLeaseLost() {
      return lost || System.nanoTime() - heldUntilNanos > 0;
    }

    private void cancel() {
      ScheduledFuture<?> current = future;
      if (current != null) {
        current.cancel(false);
      }
    }
  }
}
