package io.consumerdedup.jdbc.internal;

import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.Iterator;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.LockSupport;
import org.jspecify.annotations.Nullable;
import org.postgresql.PGStatement;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Cancels the store's statements that outrun their timeout, from one thread for all of them, where
 * the driver's own query timeout costs a thread wake-up per statement. pgjdbc schedules a task on a
 * timer thread for every execution that has a query timeout, and waking that thread for every
 * statement was a large part of a duplicate's one-statement path: with this watchdog (and the lease
 * timer no longer woken at every claim) a duplicate cost 19 to 29 % less CPU in the benchmark, side
 * by side. Here a statement is added to a queue; the thread looks at the queue a few times a
 * second, forgets the statements closed since, and cancels ({@link Statement#cancel()}) those past
 * their deadline, which is what pgjdbc's timer does. A statement that has finished meanwhile is not
 * hurt: pgjdbc's cancel does nothing for a statement that is not running, so the connection's next
 * statement is safe.
 *
 * <p>The thread is a daemon, started with the first statement and ended once nothing was watched
 * for {@link #IDLE_END}, so that an application that stops using the store keeps no thread of it.
 */
final class StatementWatchdog {

  private static final Logger log = LoggerFactory.getLogger(StatementWatchdog.class);

  /** The one the store's calls use. */
  static final StatementWatchdog SHARED = new StatementWatchdog(Duration.ofMillis(100));

  /** How long the thread stays with nothing to watch before it ends. */
  private static final long IDLE_END = TimeUnit.SECONDS.toNanos(10);

  private record Watched(Statement statement, long deadlineNanos) {}

  /** No thread runs, and none is starting: the next statement starts one. */
  private static final int IDLE = 0;

  /** A caller is starting the thread; whether it will run is not known yet. */
  private static final int STARTING = 1;

  /** The thread runs, and looks at every statement added. */
  private static final int RUNNING = 2;

  private final ConcurrentLinkedQueue<Watched> watched = new ConcurrentLinkedQueue<>();
  private final AtomicInteger state = new AtomicInteger(IDLE);
  private final AtomicBoolean startFailing = new AtomicBoolean();
  private final long tickNanos;
  private final ThreadFactory threads;

  /**
   * @param tick how often the thread looks at the statements: how late a cancel may come
   */
  StatementWatchdog(Duration tick) {
    this(tick, StatementWatchdog::daemon);
  }

  /**
   * @param threads makes the thread, not started (a test's may make one that cannot start, as
   *     {@link Thread#start()} throws once the process may start no more threads)
   */
  StatementWatchdog(Duration tick, ThreadFactory threads) {
    this.tickNanos = tick.toNanos();
    this.threads = threads;
  }

  private static Thread daemon(Runnable looking) {
    Thread thread = new Thread(looking, "consumer-dedup-statement-watchdog");
    thread.setDaemon(true);
    return thread;
  }

  /**
   * Cancels {@code statement} if it is still running {@code timeout} from now. False if the
   * watchdog's thread could not start (no more threads for the process): then the caller gives the
   * statement the driver's query timeout instead, so that no statement runs unbounded. Never true
   * for a statement that no running thread will look at.
   */
  boolean watch(Statement statement, Duration timeout) {
    watched.add(new Watched(statement, System.nanoTime() + timeout.toNanos()));
    while (true) {
      int now = state.get();
      if (now == RUNNING) {
        return true;
      }
      if (now == STARTING) {
        // Answered true while another caller's start was still under way, a statement stayed
        // queued with no thread and no query timeout when that start failed: a claim behind a
        // lock then waited for the lock, however long, rather than its timeout. Starting a
        // thread takes a moment, and only the first statement after an idle end waits for it.
        Thread.yield();
        continue;
      }
      if (state.compareAndSet(IDLE, STARTING)) {
        return startThread(statement);
      }
    }
  }

  /** Starts the thread for {@code statement}, added already; false if it could not start. */
  private boolean startThread(Statement statement) {
    try {
      threads.newThread(this::run).start();
      state.compareAndSet(STARTING, RUNNING); // unless it ended already, on an Error
      startFailing.set(false);
      return true;
    } catch (RuntimeException | Error e) {
      // IDLE first: left STARTING by an Error of what follows, every later statement would spin.
      state.set(IDLE);
      watched.removeIf(entry -> entry.statement() == statement);
      // Once per run of failures, not once per statement: while threads run short, every
      // statement of every consumer comes here.
      if (startFailing.compareAndSet(false, true)) {
        warnQuietly(
            "Could not start the thread that cancels the dedup store's statements at their"
                + " timeout; its statements use the driver's query timeout until one starts",
            e);
      }
      return false;
    }
  }

  /**
   * Whether {@code statement} may be watched: pgjdbc's cancel does nothing for a statement that is
   * not running, and makes the statement it cancels wait for the server's answer to the cancel, so
   * that a late cancel cannot hit the connection's next statement. Of other drivers that is not
   * known: their statements keep the driver's query timeout.
   */
  static boolean canWatch(Statement statement) throws SQLException {
    return PostgresPooler.PGJDBC && statement.isWrapperFor(PGStatement.class);
  }

  /** How many statements are watched now (closed ones until the thread next looks). */
  int watchedCount() {
    return watched.size();
  }

  private void run() {
    boolean endedIdle = false;
    boolean failing = false;
    try {
      long lastBusy = System.nanoTime();
      while (true) {
        LockSupport.parkNanos(tickNanos);
        long now = System.nanoTime();
        Error failed;
        try {
          failed = cancelOverdue(now);
        } catch (Error e) {
          failed = e; // an OutOfMemoryError as the walk began: the next look tries again
        }
        // Ending the thread on an Error left a statement already running unwatched until the
        // store's next statement started another thread. Said once per run of failing looks.
        if (failed != null && !failing) {
          warnQuietly(
              "The dedup store's statement watchdog failed to look at a statement; trying again"
                  + " at its next look",
              failed);
        }
        failing = failed != null;
        if (!watched.isEmpty()) {
          lastBusy = now;
        } else if (now - lastBusy > IDLE_END) {
          state.set(IDLE);
          if (!goOnForLateStatements()) {
            endedIdle = true;
            return;
          }
        }
      }
    } finally {
      // Ended by an Error outside the look (in the park itself): the next statement starts a
      // thread. Ended idle, the state is no longer this thread's to set: a new thread may own it.
      if (!endedIdle) {
        state.set(IDLE);
      }
    }
  }

  /**
   * After the thread said it ends: whether it goes on for statements added meanwhile, which found
   * it running and started none. Not if a new thread runs for them; if a caller is starting one, as
   * that start turns out: a start that fails leaves them to this thread.
   */
  private boolean goOnForLateStatements() {
    while (!watched.isEmpty()) {
      if (state.compareAndSet(IDLE, RUNNING)) {
        return true;
      }
      if (state.get() == RUNNING) {
        return false;
      }
      Thread.yield(); // STARTING
    }
    return false;
  }

  private static void warnQuietly(String message, Throwable e) {
    try {
      log.warn(message, e);
    } catch (Error ignored) {
      // Logging needs memory too; what matters is the next look, or the statement's own timeout.
    }
  }

  /**
   * Forgets the statements closed since the last look and cancels those past their deadline; the
   * first {@code Error} met (an OutOfMemoryError, a driver's), if any. One statement's Error does
   * not end the look: the statements after it are still looked at, and it is tried again at the
   * next look, unless it is past its deadline by {@link #IDLE_END}, so that a statement that always
   * fails does not keep the thread busy for good.
   */
  private @Nullable Error cancelOverdue(long now) {
    Error failed = null;
    for (Iterator<Watched> it = watched.iterator(); it.hasNext(); ) {
      Watched entry = it.next();
      try {
        if (isClosed(entry.statement())) {
          it.remove();
        } else if (now - entry.deadlineNanos() >= 0) {
          cancel(entry.statement());
          it.remove();
        }
      } catch (Error e) {
        if (now - entry.deadlineNanos() > IDLE_END) {
          it.remove();
        }
        if (failed == null) {
          failed = e;
        }
      }
    }
    return failed;
  }

  private static boolean isClosed(Statement statement) {
    try {
      return statement.isClosed();
    } catch (SQLException | RuntimeException e) {
      return true; // nothing more to cancel on it
    }
  }

  private static void cancel(Statement statement) {
    try {
      statement.cancel();
    } catch (SQLException | RuntimeException e) {
      // Closed meanwhile, or the cancel request could not reach the server: the connection's
      // network timeout still ends a statement that no longer answers.
      log.debug("Could not cancel a dedup store statement past its timeout", e);
    }
  }
}
