package io.consumerdedup.core.internal;

import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupStore;
import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
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

  /** How often, at most, the timer wakes for the task that keeps renewals off its queue's head. */
  private static final Duration MAX_HEAD_PERIOD = Duration.ofSeconds(1);

  private final DedupStore store;
  private final Duration lease;
  private final Duration interval;
  private final DedupListener listener;
  private final ScheduledThreadPoolExecutor timer;
  private volatile boolean timerStarted;
  private final ExecutorService workers;

  public LeaseRenewer(DedupStore store, Duration lease, Duration interval, DedupListener listener) {
    this(store, lease, interval, listener, daemon("consumer-dedup-lease-timer-"));
  }

  /**
   * @param timerThreads makes the timer's thread (a test's may throw, as starting one does once the
   *     process may start no more threads)
   */
  LeaseRenewer(
      DedupStore store,
      Duration lease,
      Duration interval,
      DedupListener listener,
      ThreadFactory timerThreads) {
    this(store, lease, interval, listener, timerThreads, daemon("consumer-dedup-lease-renewer-"));
  }

  /**
   * @param workerThreads makes the workers' threads (a test's may throw, as above)
   */
  LeaseRenewer(
      DedupStore store,
      Duration lease,
      Duration interval,
      DedupListener listener,
      ThreadFactory timerThreads,
      ThreadFactory workerThreads) {
    this.store = store;
    this.lease = lease;
    this.interval = interval;
    this.listener = listener;
    this.timer = new ScheduledThreadPoolExecutor(1, timerThreads);
    // Cancelled renewals must not pile up in the queue of a busy consumer.
    this.timer.setRemoveOnCancelPolicy(true);
    // As many workers as renewals in flight, which is at most the number of keys held at once.
    this.workers =
        new ThreadPoolExecutor(
            0, Integer.MAX_VALUE, 30, TimeUnit.SECONDS, new SynchronousQueue<>(), workerThreads);
  }

  /**
   * The timer, started by the first task: an executor built and never used (or never closed, as in
   * a test or a tool that builds one to look at the table) keeps no thread that wakes every second.
   */
  private ScheduledThreadPoolExecutor timer() {
    if (!timerStarted) {
      synchronized (this) {
        if (!timerStarted) {
          // A task always due before any renewal: a renewal scheduled at the head of the timer's
          // queue wakes the timer thread, and a consumer that claims one record at a time cancels
          // each renewal before it schedules the next, so every claim woke that thread (a context
          // switch a record) for a task due a renewal interval later. Behind this one it never is
          // the head.
          long headPeriod =
              Math.max(1, Math.min(interval.toNanos() / 2, MAX_HEAD_PERIOD.toNanos()));
          // The thread first, on its own: scheduling queues the task before it starts the thread,
          // so a thread that could not start ("unable to create native thread") left the task
          // queued, and each claim made while threads ran short added one more task that woke the
          // timer for the rest of the executor's life, ahead of the renewals.
          timer.prestartCoreThread();
          timer.scheduleAtFixedRate(() -> {}, headPeriod, headPeriod, TimeUnit.NANOSECONDS);
          timerStarted = true;
        }
      }
    }
    return timer;
  }

  /** How many tasks the timer holds, its own periodic one included. */
  int timerTasks() {
    return timer.getQueue().size();
  }

  private static ThreadFactory daemon(String prefix) {
    return runnable -> {
      Thread thread = new Thread(runnable, prefix + THREADS.incrementAndGet());
      thread.setDaemon(true);
      return thread;
    };
  }

  /**
   * Starts renewing the lease of {@code claim}, until {@link Renewal#stop()}.
   *
   * @param claimSentNanos {@link System#nanoTime()} just before the claim was sent: the lease runs
   *     from a moment after it, so it is surely held until this plus the lease
   */
  public Renewal start(ClaimResult.Claimed claim, long claimSentNanos) {
    return startAll(List.of(claim), claimSentNanos).get(0);
  }

  /**
   * Starts renewing the leases of claims made together, in one store call per renewal ({@link
   * DedupStore#renewAll}), each until its {@link Renewal#stop()}.
   */
  public List<Renewal> startAll(List<ClaimResult.Claimed> claims, long claimSentNanos) {
    Group group = new Group();
    List<Renewal> renewals =
        claims.stream()
            .map(claim -> new Renewal(claim, group, claimSentNanos + lease.toNanos()))
            .toList();
    group.members = renewals;
    group.future =
        timer()
            .scheduleWithFixedDelay(
                group::tick, interval.toNanos(), interval.toNanos(), TimeUnit.NANOSECONDS);
    return renewals;
  }

  /**
   * Runs {@code task} once after {@code delay}, on the timer thread itself: it must be quick and
   * must not call the store.
   */
  ScheduledFuture<?> after(Duration delay, Runnable task) {
    return timer().schedule(task, delay.toNanos(), TimeUnit.NANOSECONDS);
  }

  /** Runs {@code task} every {@code period} on a worker, until the returned future is cancelled. */
  ScheduledFuture<?> repeat(Runnable task, Duration period) {
    return timer()
        .scheduleWithFixedDelay(
            () -> submit(task), period.toNanos(), period.toNanos(), TimeUnit.NANOSECONDS);
  }

  /**
   * Hands {@code task} to a worker; false if it could not start. Never throws: a periodic task that
   * threw would be cancelled for good, and its leases left to run out.
   */
  private boolean submit(Runnable task) {
    try {
      workers.execute(task);
      return true;
    } catch (RejectedExecutionException e) {
      return false; // closed
    } catch (RuntimeException | Error e) {
      // Such as "OutOfMemoryError: unable to create native thread": try again at the next tick.
      try {
        log.error("Could not start a lease renewal or outcome retry; trying again later", e);
      } catch (RuntimeException | Error again) {
        // Out of memory again as the line is formatted, say. Thrown out of a periodic task, it
        // cancelled that task for good: a kept outcome never retried, its key PROCESSING under a
        // lease still renewed.
      }
      return false;
    }
  }

  @Override
  public void close() {
    timer.shutdownNow();
    workers.shutdownNow();
  }

  /** The leases claimed together, renewed by one store call. */
  private final class Group {
    private final AtomicInteger inFlight = new AtomicInteger();
    private volatile List<Renewal> members = List.of();
    private volatile @Nullable ScheduledFuture<?> future;

    /**
     * Runs on the timer as a periodic task, which the timer never runs again once it threw: an
     * {@code Error} here (an {@code OutOfMemoryError} as it allocates) stopped the renewing of
     * these leases for good while their handlers ran on, and once a lease ran out another consumer
     * took the key over and ran its handler beside them. It is logged and the next tick tries
     * again.
     */
    private void tick() {
      try {
        FaultPoints.reached(FaultPoints.Point.RENEWAL_DUE);
        if (members.stream().allMatch(Renewal::isOver)) {
          cancel();
          return;
        }
        if (inFlight.incrementAndGet() > MAX_RENEWALS_IN_FLIGHT) {
          inFlight.decrementAndGet(); // earlier renewals are still waiting for the database
          return;
        }
        boolean started = false;
        try {
          started = submit(this::renewOnce);
        } finally {
          if (!started) {
            inFlight.decrementAndGet(); // counted for good, two would stop every renewal
          }
        }
      } catch (RuntimeException | Error e) {
        try {
          log.error("Could not start a renewal of the leases on {}; trying again later", keys(), e);
        } catch (RuntimeException | Error again) {
          // Still out of memory, say: the next tick tries again all the same.
        }
      }
    }

    private void renewOnce() {
      try {
        List<Renewal> live = members.stream().filter(renewal -> !renewal.isOver()).toList();
        if (live.isEmpty()) {
          return;
        }
        long sent = System.nanoTime();
        Set<DedupKey> refused =
            new HashSet<>(
                store.renewAll(live.stream().map(renewal -> renewal.claim).toList(), lease));
        for (Renewal renewal : live) {
          if (refused.contains(renewal.claim.key())) {
            renewal.refused();
          } else {
            renewal.renewed(sent + lease.toNanos());
          }
        }
      } catch (RuntimeException | Error e) {
        // Keep trying: the lease lasts several intervals, and one failed renewal is not a loss.
        // An Error too: it ends this renewal, not the renewing. A driver's or pool's failure whose
        // getMessage() throws is printed through a stand-in, or the line threw and nothing said
        // why the leases were not renewed.
        log.warn("Could not renew the leases on {}; will retry", keys(), FailureTexts.loggable(e));
      } finally {
        inFlight.decrementAndGet();
      }
    }

    /** Stops the timer once no member needs renewing. */
    private void memberOver() {
      if (members.stream().allMatch(Renewal::isOver)) {
        cancel();
      }
    }

    private void cancel() {
      ScheduledFuture<?> current = future;
      if (current != null) {
        current.cancel(false);
      }
    }

    private List<DedupKey> keys() {
      return members.stream().map(renewal -> renewal.claim.key()).toList();
    }
  }

  /** The renewal of one held lease. */
  public final class Renewal {
    private final ClaimResult.Claimed claim;
    private final Group group;
    private volatile long heldUntilNanos;
    private volatile boolean stopped;
    private volatile boolean settling;
    private volatile boolean lost;
    private volatile boolean outcomeSettled;
    private final AtomicBoolean lossReported = new AtomicBoolean();

    private Renewal(ClaimResult.Claimed claim, Group group, long heldUntilNanos) {
      this.claim = claim;
      this.group = group;
      this.heldUntilNanos = heldUntilNanos;
    }

    /** The claim whose lease this renews. */
    public ClaimResult.Claimed claim() {
      return claim;
    }

    /** Whether renewing is over: the outcome was written, or the lease was found lost. */
    public boolean isOver() {
      return stopped || lost;
    }

    private void renewed(long until) {
      if (until - heldUntilNanos > 0) {
        heldUntilNanos = until; // renewals may finish out of order
      }
    }

    private void refused() {
      if (stopped || settling) {
        // While the outcome is being written, a refused renewal may just mean it was written;
        // the outcome's own fenced write tells the difference and reports a loss.
        return;
      }
      // Never throws (an Error of the store's find included): thrown here, it ended this tick's
      // answer before the key was marked lost, and its loss went unreported until a later tick.
      LeaseLoss loss = LeaseLoss.read(store, claim);
      if (stopped || settling) {
        // The handler ended while the store was asked: the row found may be its own outcome,
        // written again because the record had vanished. Its fenced write has the last word.
        return;
      }
      if (loss.kind() == LeaseLoss.Kind.GIVEN_BACK) {
        // Nobody holds the key, and the outcome written when the handler ends is still this
        // claim's: no loss to report. Renewing stops: each renewal would be refused and read the
        // record again, every interval for as long as the handler hangs. The outcome's fenced
        // write decides, and is refused if another consumer has claimed the key by then.
        stop();
        return;
      }
      markLost();
      if (!firstToReportLoss()) {
        return;
      }
      if (loss.kind() == LeaseLoss.Kind.VANISHED) {
        log.warn(
            "The record of {} (attempt {}) vanished while the handler ran (a failover to a standby"
                + " that had not received it, a DELETE, a purge): no other consumer holds the key,"
                + " but none is kept from claiming it either. Its outcome is written again when"
                + " the handler ends, unless another consumer has claimed the key by then",
            claim.key(),
            claim.token());
      } else if (loss.kind() == LeaseLoss.Kind.RELEASED) {
        log.warn(
            "Lease on {} (attempt {}) was released by an operator while the handler ran ({}):"
                + " nobody holds the key, which is FAILED, and its next delivery runs the handler"
                + " again",
            claim.key(),
            claim.token(),
            loss.releaseNote());
      } else {
        log.warn(
            "Lease on {} (attempt {}) was taken over by another consumer while the handler ran",
            claim.key(),
            claim.token());
      }
      try {
        listener.leaseLost(claim.key(), claim.token());
      } catch (RuntimeException | Error e) {
        // An Error of the application's listener (the composite one lets those through): thrown
        // on, it ended the reading of the store's answer at this key, so the other keys renewed by
        // the same call were not known to be, and after a lease their holders took their leases for
        // lost (a poll's records claimed again, "in progress" by their own claims). Through a
        // stand-in: Logback reads the message of what it prints, and one whose getMessage()
        // throws (a metrics library's Error) threw out of this line just the same.
        log.error(
            "DedupListener threw on leaseLost for {} (attempt {}); ignored",
            claim.key(),
            claim.token(),
            FailureTexts.loggable(e));
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

    /**
     * The outcome's fenced write answered (written, or refused): nothing is left to hand over. Kept
     * apart from {@link #isOver()}, which a caller's {@code stopRenewing()} or a renewal that found
     * the record gone makes true while the outcome still has to be written.
     */
    void outcomeSettled() {
      outcomeSettled = true;
    }

    /** Whether the outcome's fenced write answered ({@link #outcomeSettled()}). */
    public boolean isOutcomeSettled() {
      return outcomeSettled;
    }

    /** Stops renewing: the outcome was written, or the lease is gone. */
    public void stop() {
      stopped = true;
      group.memberOver();
    }

    /** A fenced write was refused: another consumer holds the key now. */
    public void markLost() {
      lost = true;
      group.memberOver();
    }

    /**
     * Whether the caller is the first to report this lease lost: the renewal that finds it taken
     * over while the handler runs, and the outcome's fenced write refused after it, see the same
     * loss, which the listener (and the {@code lease_lost} count) must hear once.
     */
    public boolean firstToReportLoss() {
      return lossReported.compareAndSet(false, true);
    }

    /** Whether a renewal or a fenced write found the lease taken over. */
    public boolean isTakenOver() {
      return lost;
    }

    /**
     * {@link System#nanoTime()} just before the claim or the latest renewal that answered was sent:
     * the lease held now runs at least a lease period from then, by the database's clock too.
     */
    public long heldFromNanos() {
      return heldUntilNanos - lease.toNanos();
    }

    /**
     * Whether the lease may be gone: taken over, or not renewed within a lease period (measured
     * from before the last successful renewal was sent, so never later than the database's own
     * expiry). Once true, another consumer may take the key over and run its handler.
     */
    public boolean isLeaseLost() {
      return lost || System.nanoTime() - heldUntilNanos > 0;
    }
  }
}
