package io.consumerdedup.bench;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.DedupJanitor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import java.time.Duration;
import org.HdrHistogram.Histogram;

/**
 * The retention purge: the dedup table is loaded with expired rows, claims of new keys run for a
 * while alone, then {@link DedupJanitor#purgeExpired()} runs (with its default batches) until
 * nothing expired is left while the same claims go on. Gives the purge's rows per second and the
 * claims' latency with and without it.
 */
final class PurgeBench {
  private PurgeBench() {}

  /**
   * What the purge measured.
   *
   * @param expiredRows the expired rows loaded
   * @param deleted the rows the purge deleted
   * @param purgeNanos how long it took
   * @param claimsAlone claim round trips without a purge, in microseconds
   * @param claimsDuringPurge claim round trips while it ran, in microseconds
   */
  record Result(
      long expiredRows,
      long deleted,
      long purgeNanos,
      Histogram claimsAlone,
      Histogram claimsDuringPurge) {
    double rowsPerSecond() {
      return deleted * 1e9 / purgeNanos;
    }
  }

  static Result run(BenchDatabase database, long expiredRows) throws Exception {
    DedupTable.truncate(database);
    DedupTable.preload(database, expiredRows, Duration.ofHours(-1));
    ClaimLoad load = new ClaimLoad();
    try (HikariDataSource pool = database.openPool("bench-purge", RunContext.POOL_SIZE)) {
      JdbcDedupStore store = JdbcDedupStore.builder(pool).build();
      DedupJanitor janitor = DedupJanitor.builder(store).build();
      try (IdempotentExecutor executor = IdempotentExecutor.builder(store).listener(load).build()) {
        // Claims alone for about as long as the purge will take: from 1 s to 10 s.
        Duration alone = Duration.ofMillis(Math.max(1_000, Math.min(10_000, expiredRows / 20)));
        Histogram claimsAlone = load.whileRunning(executor, () -> Thread.sleep(alone.toMillis()));
        long[] deletedAndNanos = {0, 0};
        Histogram claimsDuringPurge =
            load.whileRunning(
                executor,
                () -> {
                  long start = System.nanoTime();
                  int purged;
                  while ((purged = janitor.purgeExpired()) > 0) {
                    deletedAndNanos[0] += purged;
                  }
                  deletedAndNanos[1] = System.nanoTime() - start;
                });
        return new Result(
            expiredRows, deletedAndNanos[0], deletedAndNanos[1], claimsAlone, claimsDuringPurge);
      }
    }
  }
}
