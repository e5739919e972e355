package io.consumerdedup.bench;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.DedupJanitor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import java.util.ArrayList;
import java.util.List;
import org.HdrHistogram.Histogram;

/**
 * The retention purge: the dedup table is loaded with two weeks of rows kept seven days (half of
 * them expired, oldest first in the table as they would have been written), claims of new keys run
 * for a while alone, then {@link DedupJanitor#purgeExpired()} runs with its default settings, run
 * after run, until a run finds nothing, while the same claims go on. Gives the purge's rows per
 * second run by run (so a rate that falls as rows are deleted shows), the last run's (which walks
 * over the unexpired rows to find that it is done) and the claims' latency with and without it.
 */
final class PurgeBench {
  private PurgeBench() {}

  /** Deleted rows after which the sustained rate is read. */
  static final long SUSTAINED_AFTER = 1_000_000;

  private static final int FULL_RUN =
      DedupJanitor.DEFAULT_BATCH_SIZE * DedupJanitor.DEFAULT_MAX_BATCHES_PER_RUN;

  /** One run of the janitor: the rows it deleted and how long it took. */
  record PurgeRun(long deletedBefore, long deleted, long nanos) {
    double rowsPerSecond() {
      return deleted * 1e9 / nanos;
    }
  }

  /**
   * What the purge measured.
   *
   * @param tableRows the rows loaded
   * @param expiredRows the expired rows among them
   * @param runs the janitor's runs that deleted rows, in order
   * @param caughtUpDeleted the rows the last run deleted (those that expired meanwhile, or all of
   *     them when the backlog fits in one run)
   * @param caughtUpNanos the last run, which stopped short of its limits: nothing more to do
   * @param claimsAlone claim round trips without a purge, in microseconds
   * @param claimsDuringPurge claim round trips while it ran, in microseconds
   */
  record Result(
      long tableRows,
      long expiredRows,
      List<PurgeRun> runs,
      long caughtUpDeleted,
      long caughtUpNanos,
      Histogram claimsAlone,
      Histogram claimsDuringPurge) {
    long deleted() {
      return runs.stream().mapToLong(PurgeRun::deleted).sum() + caughtUpDeleted;
    }

    long purgeNanos() {
      return runs.stream().mapToLong(PurgeRun::nanos).sum() + caughtUpNanos;
    }

    double rowsPerSecond() {
      return deleted() * 1e9 / purgeNanos();
    }

    /** The first run's rate. */
    double startRowsPerSecond() {
      return runs.isEmpty() ? 0 : runs.get(0).rowsPerSecond();
    }

    /** The rate of the first run that started after {@value #SUSTAINED_AFTER} deleted rows. */
    double sustainedRowsPerSecond() {
      return runs.stream()
          .filter(run -> run.deletedBefore() >= SUSTAINED_AFTER)
          .findFirst()
          .map(PurgeRun::rowsPerSecond)
          .orElse(Double.NaN);
    }
  }

  static Result run(BenchDatabase database, long tableRows) throws Exception {
    DedupTable.truncate(database);
    DedupTable.preloadTwoWeeks(database, tableRows);
    long expired = DedupTable.expiredRows(database);
    ClaimLoad load = new ClaimLoad();
    try (HikariDataSource pool = database.openPool("bench-purge", RunContext.POOL_SIZE)) {
      JdbcDedupStore store = JdbcDedupStore.builder(pool).build();
      DedupJanitor janitor = DedupJanitor.builder(store).build();
      try (IdempotentExecutor executor = IdempotentExecutor.builder(store).listener(load).build()) {
        // Claims alone for about as long as the purge will take: from 1 s to 20 s.
        long aloneMillis = Math.max(1_000, Math.min(20_000, expired / 20));
        Histogram claimsAlone = load.whileRunning(executor, () -> Thread.sleep(aloneMillis));
        List<PurgeRun> runs = new ArrayList<>();
        long[] caughtUpRun = {0, 0}; // rows deleted, nanos
        Histogram claimsDuringPurge =
            load.whileRunning(
                executor,
                () -> {
                  long deletedBefore = 0;
                  while (true) {
                    long start = System.nanoTime();
                    int deleted = janitor.purgeExpired();
                    long nanos = System.nanoTime() - start;
                    // A run that stopped short of its limits found nothing more: caught up. (Rows
                    // keep expiring as the clock moves, so "until a run deletes nothing" would
                    // never end.)
                    boolean caughtUp =
                        deleted < FULL_RUN && nanos < DedupJanitor.DEFAULT_MAX_RUN_TIME.toNanos();
                    if (caughtUp) {
                      caughtUpRun[0] = deleted;
                      caughtUpRun[1] = nanos;
                      return;
                    }
                    runs.add(new PurgeRun(deletedBefore, deleted, nanos));
                    deletedBefore += deleted;
                  }
                });
        return new Result(
            tableRows,
            expired,
            runs,
            caughtUpRun[0],
            caughtUpRun[1],
            claimsAlone,
            claimsDuringPurge);
      }
    }
  }
}
