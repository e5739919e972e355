package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.catchThrowable;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.micrometer.MicrometerDedupListener;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;

/**
 * The janitor's keyset cursor, its run-while-work schedule and its backlog, on a real database of
 * each dialect: rows are written with the database's clock at chosen ages.
 */
abstract class JanitorKeysetTests {

  abstract DataSource dataSource();

  abstract JdbcDedupStore store();

  /** A time {@code seconds} before the database's now (negative: after it), in SQL. */
  abstract String ago(long seconds);

  /** A derived table of the numbers 1 to {@code count}, in a column {@code n}, in SQL. */
  abstract String numbers(int count);

  /**
   * How many unexpired rows a walk over them all takes well over {@link #TINY_TIMEOUT} to read, and
   * a batch bounded before them does not.
   */
  abstract int unexpiredRowsOutlastingATinyTimeout();

  static final Duration TINY_TIMEOUT = Duration.ofMillis(50);

  @Test
  void withTheShortestRetentionAPassEndsAtItsHorizonInsteadOfWalkingEveryUnexpiredRow()
      throws SQLException {
    // A day's retention: expired rows created two and three days ago, and rows created now,
    // which expire tomorrow, many more of them than a tiny statement timeout lets a walk read.
    insert("expired-success-", 150, "SUCCESS", 2 * 86_400, 86_400, null);
    insert("expired-failed-", 150, "FAILED", 3 * 86_400, 2 * 86_400, null);
    insert("lease-expired-", 20, "PROCESSING", 2 * 86_400, 86_400 - 60, 86_400L);
    int unexpired = unexpiredRowsOutlastingATinyTimeout();
    insertUnexpiredCreatedNow("recent-", unexpired);
    // A row of a writer whose retention is shorter than the janitor was told (an hour): expired,
    // but created after the horizon, it waits until its creation passes it.
    insert("shorter-retention-", 5, "SUCCESS", 7_200, 3_600, null);
    AtomicInteger unknownBacklogs = new AtomicInteger();
    JdbcDedupStore timingOut =
        JdbcDedupStore.builder(dataSource())
            .statementTimeout(TINY_TIMEOUT)
            // On a loaded machine even a batch bounded by the horizon can miss the tiny timeout
            // once; a walk over every unexpired row misses it at every try.
            .retryMaxAttempts(5)
            .build();
    DedupJanitor janitor =
        DedupJanitor.builder(timingOut)
            .batchSize(100)
            .shortestRetention(Duration.ofDays(1))
            .listener(
                new DedupListener() {
                  @Override
                  public void purgeBacklogUnknown(RuntimeException error) {
                    unknownBacklogs.incrementAndGet();
                  }
                })
            .build();

    AtomicInteger purged = new AtomicInteger(-1);
    Throwable failure = catchThrowable(() -> purged.set(janitor.purgeExpired()));

    assertThat(failure)
        .as("the run (its last batch reads only up to the horizon, not every unexpired row)")
        .isNull();
    assertThat(purged).hasValue(320);
    assertThat(count("expired-%") + count("lease-expired-%")).isZero();
    assertThat(count("recent-%")).isEqualTo(unexpired);
    assertThat(count("shorter-retention-%")).isEqualTo(5);
    // The backlog is counted up to the horizon as well: no count cancelled, none unknown.
    assertThat(unknownBacklogs).hasValue(0);
    assertThat(janitor.purgeExpired()).isZero();
    assertThat(janitor.lastBacklog()).contains(new PurgeBacklog(0, false, null, false));
    assertThat(unknownBacklogs).hasValue(0);
  }

  /**
   * The one-shot purge of a scheduled job, on a table with fewer expired rows than its limit: it
   * walked on over every unexpired row to the end of the index, and at volume the statement timeout
   * cancelled it at every run, the expired rows it had found with it. Told the shortest retention,
   * it ends at the horizon as the janitor's batches do.
   */
  @Test
  void aOneShotPurgeToldTheShortestRetentionEndsAtItsHorizon() throws SQLException {
    insert("expired-success-", 50, "SUCCESS", 2 * 86_400, 86_400, null);
    insert("lease-expired-", 5, "PROCESSING", 2 * 86_400, 86_400 - 60, 86_400L);
    int unexpired = unexpiredRowsOutlastingATinyTimeout();
    insertUnexpiredCreatedNow("recent-", unexpired);
    JdbcDedupStore timingOut =
        JdbcDedupStore.builder(dataSource())
            .statementTimeout(TINY_TIMEOUT)
            // As above: a bounded purge may miss the tiny timeout once on a loaded machine.
            .retryMaxAttempts(5)
            .build();

    AtomicInteger purged = new AtomicInteger(-1);
    Throwable failure = catchThrowable(() -> purged.set(timingOut.purge(1000, Duration.ofDays(1))));

    assertThat(failure)
        .as("the one-shot purge (it reads only up to the horizon, not every unexpired row)")
        .isNull();
    assertThat(purged).hasValue(55);
    assertThat(count("expired-%") + count("lease-expired-%")).isZero();
    assertThat(count("recent-%")).isEqualTo(unexpired);
    assertThatThrownBy(() -> timingOut.purge(1000, Duration.ZERO))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageStartingWith("shortestRetention must be positive");
  }

  @Test
  void theLongestShortestRetentionLeavesEveryRowAndAnyLongerOrNoneIsRefused() throws SQLException {
    insert("expired-", 10, "SUCCESS", 7_200, 60, null);
    DedupJanitor.Builder builder = DedupJanitor.builder(store());

    assertThatThrownBy(() -> builder.shortestRetention(ChronoUnit.FOREVER.getDuration()))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageStartingWith(
            "shortestRetention must be at most " + IdempotentExecutor.LONGEST_RETENTION);
    assertThatThrownBy(() -> builder.shortestRetention(Duration.ZERO))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageStartingWith("shortestRetention must be positive");

    // A horizon 1000 years back is a time both databases hold: the statements run, and no row is
    // that old.
    DedupJanitor janitor = builder.shortestRetention(IdempotentExecutor.LONGEST_RETENTION).build();
    assertThat(janitor.purgeExpired()).isZero();
    assertThat(janitor.lastBacklog()).contains(new PurgeBacklog(0, false, null, false));
    assertThat(count("expired-%")).isEqualTo(10);
  }

  /** Inserts {@code count} rows created now, expiring in a day. */
  private void insertUnexpiredCreatedNow(String prefix, int count) throws SQLException {
    try (Connection connection = dataSource().getConnection();
        Statement statement = connection.createStatement()) {
      statement.executeUpdate(
          "INSERT INTO consumer_dedup (biz_type, biz_key, status, attempts, owner, created_at,"
              + " updated_at, expires_at) SELECT 'payment', CONCAT('"
              + prefix
              + "', n), 'SUCCESS', 1, 'test', "
              + ago(0)
              + ", "
              + ago(0)
              + ", "
              + ago(-86_400)
              + " FROM "
              + numbers(count));
    }
  }

  @Test
  void aRunStoppedAtItsLimitContinuesAfterTheLastRowItDeletedAndACaughtUpRunStartsOver()
      throws SQLException {
    // 7 creation times, 70 expired rows each: 100-row batches split groups of equal created_at.
    for (int group = 0; group < 7; group++) {
      insert("expired-" + group + "-", 70, "SUCCESS", 10_000 - group, 60, null);
    }
    insert("kept-", 30, "SUCCESS", 9_000, -3_600, null);
    DedupJanitor janitor = DedupJanitor.builder(store()).batchSize(100).maxBatchesPerRun(3).build();

    assertThat(janitor.purgeExpired()).isEqualTo(300);
    // The 300 oldest went, in (created_at, key) order: groups 0 to 3 and the first 20 of group 4.
    assertThat(count("expired-%")).isEqualTo(190);
    assertThat(count("expired-4-%")).isEqualTo(50);
    // An expired row older than the cursor, written after that run: the run that continues does
    // not walk back to it ...
    insert("late-", 1, "SUCCESS", 20_000, 60, null);
    assertThat(janitor.purgeExpired()).isEqualTo(190);
    assertThat(count("late-%")).isEqualTo(1);
    // ... and the run after the one that caught up starts from the oldest row again.
    assertThat(janitor.purgeExpired()).isEqualTo(1);
    assertThat(count("expired-%") + count("late-%")).isZero();
    assertThat(count("kept-%")).isEqualTo(30);
  }

  @Test
  void onlyExpiredRowsGoAndNeverAPROCESSINGRowUnderALiveLease() throws SQLException {
    insert("success-", 10, "SUCCESS", 7_200, 60, null);
    insert("failed-", 10, "FAILED", 7_200, 60, null);
    insert("lease-expired-", 10, "PROCESSING", 7_200, 60, 30L);
    insert("lease-live-", 10, "PROCESSING", 7_200, 60, -600L);
    insert("retained-success-", 10, "SUCCESS", 7_200, -600, null);
    insert("retained-failed-", 10, "FAILED", 7_200, -600, null);

    DedupJanitor janitor = DedupJanitor.builder(store()).batchSize(7).build();

    assertThat(janitor.purgeExpired()).isEqualTo(30);
    assertThat(count("success-%") + count("failed-%") + count("lease-expired-%")).isZero();
    assertThat(count("lease-live-%")).isEqualTo(10);
    assertThat(count("retained-%")).isEqualTo(20);
  }

  @Test
  void aPurgeSkipsARowAHandlersTransactionHoldsInsteadOfWaitingForIt() throws Exception {
    // A FAILED key past its retention, among expired rows older and younger than it, is retried
    // in mode TRANSACTIONAL: its claim holds the row locked until the handler's transaction ends.
    insert("expired-before-", 50, "SUCCESS", 7_200, 60, null);
    insert("retried-", 1, "FAILED", 7_100, 60, null);
    insert("expired-after-", 50, "SUCCESS", 7_000, 60, null);
    DedupKey retried = DedupKey.of("payment", "retried-0000");
    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(dataSource());
    JdbcDedupStore transactional = JdbcDedupStore.builder(transactions).build();
    CountDownLatch claimed = new CountDownLatch(1);
    CountDownLatch handlerDone = new CountDownLatch(1);
    ExecutorService handler = Executors.newSingleThreadExecutor();
    try {
      Future<ClaimResult> claim =
          handler.submit(
              () ->
                  transactions.inTransaction(
                      () -> {
                        ClaimResult result =
                            transactional.claimInTransaction(
                                new ClaimRequest(
                                    retried,
                                    "handler",
                                    Duration.ofMinutes(1),
                                    Duration.ofDays(1),
                                    null,
                                    "payments-0@7"));
                        claimed.countDown();
                        handlerDone.await();
                        return result;
                      }));
      assertThat(claimed.await(30, TimeUnit.SECONDS)).isTrue();

      // While the handler's transaction is open: the purge goes past the row it holds.
      int purged = janitor().purgeExpired();

      assertThat(claim).isNotDone();
      handlerDone.countDown();
      assertThat(claim.get(30, TimeUnit.SECONDS)).isInstanceOf(ClaimResult.Claimed.class);
      assertThat(purged).isEqualTo(100);
      assertThat(count("expired-%")).isZero();
      assertThat(store().find(retried).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
    } finally {
      handlerDone.countDown();
      handler.shutdownNow();
    }
  }

  private DedupJanitor janitor() {
    return DedupJanitor.builder(store()).batchSize(30).build();
  }

  @Test
  void aStartedJanitorRunsBackToBackWhileItFindsFullBatchesThenIdles() throws Exception {
    insert("expired-", 1000, "SUCCESS", 7_200, 60, null);
    insert("kept-", 10, "SUCCESS", 60, -3_600, null);
    AtomicInteger runs = new AtomicInteger();
    DedupListener countingRuns =
        new DedupListener() {
          @Override
          public void purgeBacklog(long expiredRows, Duration oldestExpiredAge) {
            runs.incrementAndGet();
          }
        };
    try (DedupJanitor janitor =
        DedupJanitor.builder(store())
            .batchSize(100)
            .maxBatchesPerRun(2)
            .interval(Duration.ofHours(1))
            .listener(countingRuns)
            .build()) {
      janitor.start();
      // Five runs of two full batches, then one that finds nothing and waits the hour.
      await().atMost(Duration.ofSeconds(30)).until(() -> count("expired-%") == 0);
      await().atMost(Duration.ofSeconds(10)).until(() -> runs.get() >= 6);
      TimeUnit.MILLISECONDS.sleep(500);
      assertThat(runs).hasValue(6);
    }
    assertThat(count("kept-%")).isEqualTo(10);
  }

  @Test
  void theBacklogCountsExpiredRowsAndTheAgeOfTheOldestAndSaysWhenTheJanitorIsBehind()
      throws SQLException {
    insert("old-", 40, "SUCCESS", 30_000, 7_200, null);
    insert("recent-", 25, "FAILED", 20_000, 600, null);
    insert("lease-live-", 5, "PROCESSING", 20_000, 9_000, -600L);
    insert("kept-", 15, "SUCCESS", 100, -3_600, null);
    SimpleMeterRegistry registry = new SimpleMeterRegistry();
    DedupJanitor janitor =
        DedupJanitor.builder(store())
            .interval(Duration.ofMinutes(10))
            .listener(new MicrometerDedupListener(registry))
            .build();

    PurgeBacklog before = janitor.measureBacklog().orElseThrow();

    assertThat(before.expiredRows()).isEqualTo(65);
    assertThat(before.atLeast()).isFalse();
    assertThat(before.oldestExpiredAge()).isBetween(Duration.ofHours(2), Duration.ofMinutes(125));
    assertThat(before.behind()).isTrue();
    assertThat(registry.get(MicrometerDedupListener.PURGE_BACKLOG).gauge().value()).isEqualTo(65);
    assertThat(
            registry
                .get(MicrometerDedupListener.PURGE_OLDEST_EXPIRED)
                .timeGauge()
                .value(TimeUnit.SECONDS))
        .isBetween(7_200.0, 7_500.0);

    assertThat(janitor.purgeExpired()).isEqualTo(65);
    PurgeBacklog after = janitor.measureBacklog().orElseThrow();

    assertThat(after).isEqualTo(new PurgeBacklog(0, false, null, false));
    assertThat(janitor.lastBacklog()).contains(after);
    assertThat(registry.get(MicrometerDedupListener.PURGE_BACKLOG).gauge().value()).isZero();
    assertThat(
            registry
                .get(MicrometerDedupListener.PURGE_OLDEST_EXPIRED)
                .timeGauge()
                .value(TimeUnit.SECONDS))
        .isZero();
  }

  /**
   * Inserts {@code count} rows created {@code createdAgo} seconds ago (all at the same time),
   * expired {@code expiredAgo} seconds ago (negative: expiring later), under a lease that ended
   * {@code leaseEndedAgo} seconds ago if not null.
   */
  void insert(
      String prefix, int count, String status, long createdAgo, long expiredAgo, Long leaseEndedAgo)
      throws SQLException {
    String sql =
        "INSERT INTO consumer_dedup (biz_type, biz_key, status, attempts, owner, lease_until,"
            + " created_at, updated_at, expires_at) VALUES ('payment', ?, ?, 1, 'test', "
            + (leaseEndedAgo == null ? "NULL" : ago(leaseEndedAgo))
            + ", "
            + ago(createdAgo)
            + ", "
            + ago(createdAgo)
            + ", "
            + ago(expiredAgo)
            + ")";
    List<String> keys = new ArrayList<>();
    for (int i = 0; i < count; i++) {
      keys.add(prefix + String.format("%04d", i));
    }
    try (Connection connection = dataSource().getConnection();
        PreparedStatement statement = connection.prepareStatement(sql)) {
      for (String key : keys) {
        statement.setString(1, key);
        statement.setString(2, status);
        statement.addBatch();
      }
      statement.executeBatch();
    }
  }

  int count(String pattern) throws SQLException {
    try (Connection connection = dataSource().getConnection();
        Statement statement = connection.createStatement();
        ResultSet row =
            statement.executeQuery(
                "SELECT count(*) FROM consumer_dedup WHERE biz_key LIKE '" + pattern + "'")) {
      row.next();
      return row.getInt(1);
    }
  }
}
