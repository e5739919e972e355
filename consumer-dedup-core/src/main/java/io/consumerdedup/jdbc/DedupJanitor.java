package io.consumerdedup.jdbc;

import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.core.DedupStoreUnavailableException;
import io.consumerdedup.core.internal.Durations;
import io.consumerdedup.core.internal.FailureTexts;
import io.consumerdedup.jdbc.internal.KeysetPurge;
import io.consumerdedup.jdbc.internal.PurgeSql;
import io.consumerdedup.jdbc.internal.SqlStates;
import java.sql.SQLException;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Function;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Deletes records whose retention has passed, in bounded batches, so the dedup table stays bounded.
 * Safe to run on every instance at once: batches skip rows another janitor (or a claim) has locked.
 *
 * <p>On a {@link JdbcDedupStore} each batch starts after the last row the previous one deleted (a
 * keyset cursor over the {@code created_at} index), so a run never walks again over the index
 * entries of rows it already deleted. A run ends when a batch finds fewer expired rows than it may
 * delete (caught up: the next run starts from the oldest row again, {@code interval} later), or
 * after {@code maxBatchesPerRun} batches or {@code maxRunTime} (work left: the next run continues
 * from where this one stopped, at once). A run that fails leaves the next one to start from the
 * oldest row again, {@code interval} later. Each run first measures the {@link PurgeBacklog}, tells
 * the listener ({@link DedupListener#purgeBacklog}) and logs a WARN when the janitor is behind. A
 * run whose measurement fails purges all the same, with the backlog unknown ({@link
 * DedupListener#purgeBacklogUnknown}).
 *
 * <p>Told the shortest retention the table's writers use ({@link Builder#shortestRetention}), a
 * batch looks only at rows created longer ago than that (database time): no younger row can have
 * expired, and the batch that finds the last expired one stops there instead of walking every
 * unexpired row to the end of the index, which at volume outlasts the statement timeout.
 *
 * <pre>{@code
 * DedupJanitor janitor = DedupJanitor.builder(store).interval(Duration.ofMinutes(10)).build();
 * janitor.start();   // ... janitor.close() on shutdown
 * }</pre>
 */
public final class DedupJanitor implements AutoCloseable {

  /** Default number of rows deleted per statement. */
  public static final int DEFAULT_BATCH_SIZE = 1000;

  /** Default most batches in one run, so one run never holds the janitor's thread for long. */
  public static final int DEFAULT_MAX_BATCHES_PER_RUN = 100;

  /** Default longest run; a run with work left is followed by the next one at once. */
  public static final Duration DEFAULT_MAX_RUN_TIME = Duration.ofSeconds(10);

  /** Default time between runs once caught up. */
  public static final Duration DEFAULT_INTERVAL = Duration.ofMinutes(10);

  /**
   * The longest {@code interval} or {@code maxRunTime} (100 years): the janitor times them in
   * nanoseconds, and beyond about 292 years they no longer fit a long.
   */
  public static final Duration LONGEST_DURATION = Duration.ofDays(36_500);

  private static final String TIMED_IN_NANOS = "timed in nanoseconds";

  /** How long the janitor's thread waits before it tries again to schedule the next run. */
  private static final Duration RESCHEDULE_PAUSE = Duration.ofSeconds(1);

  /**
   * The janitor is behind when the oldest expired row expired longer ago than this many intervals:
   * a janitor that keeps up leaves rows expired for at most about one interval.
   */
  public static final int BEHIND_AFTER_INTERVALS = 3;

  private static final Logger log = LoggerFactory.getLogger(DedupJanitor.class);

  private final DedupStore store;
  private final @Nullable KeysetPurge keyset;

  /** The store's statement timeout, on a {@link JdbcDedupStore}: what cancels a batch. */
  private final @Nullable Duration statementTimeout;

  private final int batchSize;
  private final int maxBatchesPerRun;
  private final Duration maxRunTime;
  private final Duration interval;
  private final DedupListener listener;
  private final @Nullable Duration shortestRetention;
  private final Object runLock = new Object();
  private KeysetPurge.@Nullable Position cursor;
  private boolean workLeft;
  private long lastBehindWarning;
  private final FailureStreak backlogCountFailures = new FailureStreak();
  private final FailureStreak backlogReportFailures = new FailureStreak();
  private final FailureStreak purgedReportFailures = new FailureStreak();

  private volatile @Nullable PurgeBacklog lastBacklog;
  private final Function<ThreadFactory, ScheduledThreadPoolExecutor> schedulers;
  private @Nullable ScheduledExecutorService scheduler;

  private DedupJanitor(Builder builder) {
    this.store = builder.store;
    this.keyset =
        store instanceof JdbcDedupStore jdbc
            ? new KeysetPurge(jdbc.calls(), builder.shortestRetention)
            : null;
    this.statementTimeout = store instanceof JdbcDedupStore jdbc ? jdbc.statementTimeout() : null;
    this.batchSize = builder.batchSize;
    this.maxBatchesPerRun = builder.maxBatchesPerRun;
    this.maxRunTime = builder.maxRunTime;
    this.interval = builder.interval;
    this.listener = DedupListener.composite(List.of(builder.listener));
    this.shortestRetention = builder.shortestRetention;
    this.schedulers = builder.schedulers;
  }

  public static Builder builder(DedupStore store) {
    return new Builder(store);
  }

  /**
   * Runs once now: deletes expired records batch after batch, until a batch comes back short, or
   * the per-run limits ({@code maxBatchesPerRun}, {@code maxRunTime}) are reached; a call after one
   * that stopped at a limit continues after the last row it deleted, a call after one that threw
   * starts from the oldest row.
   *
   * @return how many records were deleted
   */
  public int purgeExpired() {
    synchronized (runLock) {
      KeysetPurge.@Nullable Estimate estimate = null;
      try {
        estimate = countBacklog();
      } catch (RuntimeException | Error e) {
        // Reported by countBacklog. The purge does not need the count: a count that fails run
        // after run (a timeout over the index entries of purged rows) must not stop the purge.
      }
      if (estimate != null) {
        reportBacklog(estimate);
      }
      long deadline = System.nanoTime() + maxRunTime.toNanos();
      int total = 0;
      boolean full = true;
      boolean failed = true;
      try {
        for (int batch = 0; batch < maxBatchesPerRun && full; batch++) {
          if (batch > 0 && System.nanoTime() - deadline > 0) {
            break;
          }
          KeysetPurge.Batch deleted = deleteBatch();
          full = deleted.full();
          total = Math.addExact(total, deleted.deleted());
        }
        failed = false;
      } finally {
        workLeft = full && !failed;
        if (!full || failed) {
          // A failed run starts the next one from the oldest row, as a caught-up run does. Kept,
          // the cursor went back there only once a batch came back short: a batch after it that
          // failed at every run (at volume the last of a pass, which walks every unexpired row to
          // the end of the index and is cancelled at the statement timeout) left the rows behind
          // it that expired later (FAILED ones under their longer retention) never purged.
          cursor = null;
        }
        if (total > 0) {
          log.info("Purged {} expired dedup records", total);
          reportPurged(total);
        }
      }
      return total;
    }
  }

  /** One batch from the cursor; a store other than JDBC purges from its oldest rows each time. */
  private KeysetPurge.Batch deleteBatch() {
    if (keyset == null) {
      int deleted = store.purge(batchSize);
      return new KeysetPurge.Batch(deleted, deleted >= batchSize, null);
    }
    KeysetPurge.Batch batch;
    try {
      batch = keyset.deleteAfter(cursor, batchSize);
    } catch (DedupStoreUnavailableException e) {
      if (e.getCause() instanceof SQLException cause && SqlStates.isCancelled(cause)) {
        throw cancelledBatch(e);
      }
      throw e;
    }
    cursor = batch.last();
    return batch;
  }

  /**
   * A batch cancelled at the store's statement timeout, saying what to change. The database only
   * says the statement was cancelled (PostgreSQL: "due to user request", as the store's watchdog
   * asks for the cancel): nothing named the timeout nor the batch size, and the failure came back
   * run after run while the WARN of a janitor behind advised a larger batch.
   */
  private DedupStoreUnavailableException cancelledBatch(DedupStoreUnavailableException failure) {
    return new DedupStoreUnavailableException(
        "A purge batch of up to "
            + batchSize
            + " rows was cancelled, deleting none of them: it ran longer than the store's"
            + " statementTimeout ("
            + statementTimeout
            + "), or an operator cancelled it. A batch of many rows takes longer: lower batchSize;"
            + " one that steps over the index entries of many purged rows is quick again after a"
            + " VACUUM of the table; without shortestRetention the last batch of each pass reads"
            + " every unexpired row. Or raise the store's statementTimeout. "
            + FailureTexts.messageOf(failure),
        null,
        null,
        failure);
  }

  /**
   * Measures the backlog now (on a {@link JdbcDedupStore}; empty on other stores), tells the
   * listener (one that throws is logged, and the backlog still answered), and logs a WARN, at most
   * once an interval, while the janitor is behind.
   *
   * @throws DedupStoreException if the count failed: the backlog is then unknown ({@link
   *     #lastBacklog()} empty, the listener told {@link DedupListener#purgeBacklogUnknown}), and
   *     the first failure after a count that worked is logged at WARN
   */
  public Optional<PurgeBacklog> measureBacklog() {
    KeysetPurge.@Nullable Estimate estimate = countBacklog();
    return estimate == null ? Optional.empty() : Optional.of(reportBacklog(estimate));
  }

  /** The count of the backlog, null on a store without one; a failed count makes it unknown. */
  private KeysetPurge.@Nullable Estimate countBacklog() {
    if (keyset == null) {
      return null;
    }
    try {
      return keyset.estimate();
    } catch (RuntimeException e) {
      backlogUnknown(e);
      throw e;
    } catch (Error e) {
      // Such as an OutOfMemoryError from the DataSource: the last count must not stand for now.
      backlogUnknown(
          new IllegalStateException("The backlog count failed: " + FailureTexts.describe(e), e));
      throw e;
    }
  }

  private void backlogUnknown(RuntimeException failure) {
    lastBacklog = null;
    try {
      listener.purgeBacklogUnknown(failure);
    } catch (RuntimeException | Error e) {
      backlogReportFailed(e);
    }
    // After the listener: its gauges must not show the last count whatever the log line throws.
    warnBacklogUnknown(failure);
  }

  private PurgeBacklog reportBacklog(KeysetPurge.Estimate estimate) {
    backlogCountFailures.ended();
    Duration oldest = estimate.oldestExpiredAge();
    boolean behind =
        oldest != null && oldest.compareTo(interval.multipliedBy(BEHIND_AFTER_INTERVALS)) > 0;
    PurgeBacklog backlog =
        new PurgeBacklog(
            estimate.expiredRows(),
            estimate.expiredRows() >= PurgeSql.BACKLOG_SAMPLE,
            oldest,
            behind);
    lastBacklog = backlog;
    try {
      listener.purgeBacklog(backlog.expiredRows(), oldest == null ? Duration.ZERO : oldest);
      backlogReportFailures.ended();
    } catch (RuntimeException | Error e) {
      // The application's listener threw (an Error such as a NoSuchMethodError of a metrics
      // library of another version recurs at every call). Passed on, it ended every run before
      // its purge, so retention stopped for good, and it took the Actuator summary, which
      // measures the backlog too, down to a bare 500 hiding the counts.
      backlogReportFailed(e);
    }
    if (behind) {
      warnBehind(backlog);
    }
    return backlog;
  }

  private void warnBacklogUnknown(RuntimeException failure) {
    Throwable loggable = FailureTexts.loggable(failure);
    if (!backlogCountFailures.firstOfStreak()) {
      log.debug("The backlog of the purge of expired dedup records is still unknown", loggable);
      return;
    }
    log.warn(
        "Could not count the backlog of the purge of expired dedup records; the purge goes on"
            + " without it, and the backlog is unknown until a count succeeds. If the count timed"
            + " out, VACUUM the table (the count steps over the index entries of purged rows"
            + " until a vacuum removes them) or raise the store's statementTimeout",
        loggable);
  }

  /**
   * Tells the listener what a run purged. A listener that throws (an Error such as a
   * NoSuchMethodError of a metrics library of another version recurs at every run) must neither
   * turn the run into a failed one, hiding its count from a caller and making the schedule wait an
   * interval with work left, nor replace the error of a batch that failed after others purged.
   */
  private void reportPurged(int total) {
    try {
      listener.purged(total);
      purgedReportFailures.ended();
    } catch (RuntimeException | Error e) {
      Throwable loggable = FailureTexts.loggable(e);
      if (!purgedReportFailures.firstOfStreak()) {
        log.debug("Reporting a purge of expired dedup records failed again", loggable);
        return;
      }
      log.error(
          "Reporting a purge of expired dedup records failed (a DedupListener threw); the purge"
              + " goes on without the report",
          loggable);
    }
  }

  private void backlogReportFailed(Throwable failure) {
    Throwable loggable = FailureTexts.loggable(failure);
    if (!backlogReportFailures.firstOfStreak()) {
      log.debug(
          "Reporting the backlog of the purge of expired dedup records failed again", loggable);
      return;
    }
    log.error(
        "Reporting the backlog of the purge of expired dedup records failed (a DedupListener"
            + " threw); the purge goes on without the report",
        loggable);
  }

  private synchronized void warnBehind(PurgeBacklog backlog) {
    long now = System.nanoTime();
    if (lastBehindWarning != 0 && now - lastBehindWarning < interval.toNanos()) {
      return;
    }
    lastBehindWarning = now;
    log.warn(
        "The purge of expired dedup records is behind: the oldest expired record expired {} ago"
            + " (more than {} intervals of {}), {}{} expired records wait among the oldest;"
            + " raise batchSize or maxBatchesPerRun, or check for failed runs (lower batchSize"
            + " if its batches are cancelled at the statement timeout)",
        backlog.oldestExpiredAge(),
        BEHIND_AFTER_INTERVALS,
        interval,
        backlog.atLeast() ? "at least " : "",
        backlog.expiredRows());
  }

  /**
   * The shortest retention this janitor was told the table's writers use, whose horizon bounds its
   * batches ({@link Builder#shortestRetention}); empty when its batches walk to the end of the
   * index.
   */
  public Optional<Duration> shortestRetention() {
    return Optional.ofNullable(shortestRetention);
  }

  /**
   * The backlog the last run (or {@link #measureBacklog()}) measured; empty before the first
   * measurement and while the last one failed.
   */
  public Optional<PurgeBacklog> lastBacklog() {
    return Optional.ofNullable(lastBacklog);
  }

  /**
   * Runs {@link #purgeExpired()} on a daemon thread, until {@link #close()}: the first run at once
   * (so the backlog is measured at start-up), the next one at once while runs stop with work left,
   * else {@code interval} after the last one.
   */
  public synchronized void start() {
    if (scheduler != null) {
      throw new IllegalStateException("DedupJanitor already started");
    }
    ScheduledThreadPoolExecutor started =
        schedulers.apply(
            runnable -> {
              Thread thread = new Thread(runnable, "consumer-dedup-janitor");
              thread.setDaemon(true);
              return thread;
            });
    // close() drops the next run (which may be an interval away) instead of waiting for it.
    started.setExecuteExistingDelayedTasksAfterShutdownPolicy(false);
    scheduler = started;
    try {
      scheduleNext(Duration.ZERO);
    } catch (RuntimeException | Error e) {
      // No run was scheduled (an OutOfMemoryError as the task was allocated): left set, the
      // scheduler made start() again refuse as "already started", and no run ever came.
      scheduler = null;
      started.shutdownNow();
      throw e;
    }
  }

  private synchronized void scheduleNext(Duration delay) {
    if (scheduler != null && !scheduler.isShutdown()) {
      // runScheduled catches what a run throws, and close() shuts the scheduler down: the future
      // has nothing to tell.
      var unused = scheduler.schedule(this::runScheduled, delay.toMillis(), TimeUnit.MILLISECONDS);
    }
  }

  private void runScheduled() {
    boolean more = false;
    try {
      purgeExpired();
      more = workLeft;
    } catch (RuntimeException | Error e) {
      // The next run tries again: a failed purge only delays the cleanup, where a run that let an
      // Error end the schedule would stop retention for good, without a word, until a restart.
      // Logback reads the message of the failure and of its causes: one that cannot give it (a
      // DataSource's exception whose getMessage() throws) made the log call throw, and every run
      // failed without a word. Its stand-in prints what can be read.
      Throwable loggable = FailureTexts.loggable(e);
      if (isClosed()) {
        log.debug("Purge of expired dedup records stopped by the janitor's close", loggable);
      } else if (e instanceof Error) {
        log.error("Purge of expired dedup records failed; next try in {}", interval, loggable);
      } else {
        log.warn("Purge of expired dedup records failed; next try in {}", interval, loggable);
      }
    } finally {
      // Whatever the logging of a failure throws as well (an OutOfMemoryError again, as the log
      // line is formatted), the schedule goes on.
      scheduleNextWhatever(more ? Duration.ZERO : interval);
    }
  }

  /**
   * Schedules the next run, on the janitor's own thread, which has nothing else to do: until it is
   * scheduled or the janitor is closed, trying again every {@link #RESCHEDULE_PAUSE}. Thrown out of
   * the run (an OutOfMemoryError as the scheduler allocates the task, likely just when a run failed
   * for want of memory), the failure went into a future nobody reads: no run came again, without a
   * word, and the table grew until the next restart.
   */
  private void scheduleNextWhatever(Duration delay) {
    boolean said = false;
    while (true) {
      try {
        scheduleNext(delay);
        return;
      } catch (RuntimeException | Error e) {
        if (!said) {
          said = true;
          try {
            log.error(
                "Could not schedule the next purge of expired dedup records; trying again every {}",
                RESCHEDULE_PAUSE,
                FailureTexts.loggable(e));
          } catch (RuntimeException | Error again) {
            // Still out of memory, say: the scheduling is tried again all the same.
          }
        }
      }
      try {
        Thread.sleep(RESCHEDULE_PAUSE.toMillis());
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt(); // only a scheduler shut down at once interrupts
        return;
      }
    }
  }

  private synchronized boolean isClosed() {
    return scheduler == null || scheduler.isShutdown();
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
    private Duration maxRunTime = DEFAULT_MAX_RUN_TIME;
    private Duration interval = DEFAULT_INTERVAL;
    private DedupListener listener = DedupListener.NOOP;
    private @Nullable Duration shortestRetention;
    private Function<ThreadFactory, ScheduledThreadPoolExecutor> schedulers =
        threads -> new ScheduledThreadPoolExecutor(1, threads);

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

    /**
     * Longest run; the next run continues at once. Default {@link #DEFAULT_MAX_RUN_TIME}; at most
     * {@link #LONGEST_DURATION}.
     */
    public Builder maxRunTime(Duration maxRunTime) {
      this.maxRunTime =
          Durations.requireBetween(
              "maxRunTime", maxRunTime, Duration.ofNanos(1), LONGEST_DURATION, TIMED_IN_NANOS);
      return this;
    }

    /**
     * Time between runs once caught up. Default {@link #DEFAULT_INTERVAL}; at most {@link
     * #LONGEST_DURATION}.
     */
    public Builder interval(Duration interval) {
      this.interval =
          Durations.requireBetween(
              "interval", interval, Duration.ofNanos(1), LONGEST_DURATION, TIMED_IN_NANOS);
      return this;
    }

    /**
     * The shortest retention any writer of the table uses: of every {@link
     * io.consumerdedup.core.IdempotentExecutor} (and direct store call) writing to it, the least of
     * its successRetention and failedRetention. A batch then looks only at rows created longer ago
     * than that, database time: a row's expiry is the database's now at a write plus the writer's
     * retention, and its creation is no later than that write, so no younger row can have expired.
     * The last batch of each pass then ends at that horizon instead of walking every unexpired row
     * to the end of the table's {@code created_at} index, which at volume takes longer than the
     * statement timeout. Set too long, rows of a writer with a shorter retention are deleted only
     * once their creation passes it, later than they expired; never earlier. Unset (the default),
     * every batch may walk to the end of the index. Ignored on a store other than {@link
     * JdbcDedupStore}. At most {@link io.consumerdedup.core.IdempotentExecutor#LONGEST_RETENTION}.
     */
    public Builder shortestRetention(Duration shortestRetention) {
      this.shortestRetention = JdbcDedupStore.requireShortestRetention(shortestRetention);
      return this;
    }

    /** Receives {@link DedupListener#purged(int)} and {@link DedupListener#purgeBacklog}. */
    public Builder listener(DedupListener listener) {
      this.listener = Objects.requireNonNull(listener, "listener");
      return this;
    }

    /**
     * For tests: makes the scheduler of {@link #start()}, one thread from the factory given (a
     * test's may throw as it schedules, as scheduling does when memory runs out).
     */
    Builder schedulers(Function<ThreadFactory, ScheduledThreadPoolExecutor> schedulers) {
      this.schedulers = Objects.requireNonNull(schedulers, "schedulers");
      return this;
    }

    public DedupJanitor build() {
      return new DedupJanitor(this);
    }
  }

  /**
   * A failure that recurs at every run (a count that times out, a listener of another library
   * version) is logged in full once, then at DEBUG until the call works again, so the log shows
   * each streak without repeating it every interval.
   */
  private static final class FailureStreak {
    private final AtomicBoolean logged = new AtomicBoolean();

    /** Whether this failure starts a streak (the first since the call last worked). */
    boolean firstOfStreak() {
      return logged.compareAndSet(false, true);
    }

    void ended() {
      logged.set(false);
    }
  }
}
