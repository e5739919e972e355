package io.consumerdedup.bench;

import io.consumerdedup.testing.ChildJvm;
import java.io.PrintStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Random;
import java.util.Set;

/**
 * The crash window of mode SEPARATE, measured: consumers in child JVMs, killed (SIGKILL) at random
 * moments while they work through a topic, each followed by a new consumer, then one that finishes
 * the topic. At each kill it counts the records whose handler had applied its effect but whose
 * SUCCESS was not written: exactly those run again after the takeover. At the end every key must be
 * SUCCESS and applied, and the effects beyond each key's first must equal the sum of those counts.
 */
final class CrashWindow {
  private static final Duration LEASE = Duration.ofSeconds(2);
  private static final long HANDLER_MILLIS = 5;
  private static final Duration STARTUP = Duration.ofSeconds(60);
  private static final Duration FINISH = Duration.ofMinutes(5);

  /**
   * Records whose handler runs again, per kill, for one path.
   *
   * @param extraEffects effects beyond the first of each key at the end
   * @param keysNotSuccess keys of the workload not SUCCESS at the end (0 when the topic was done)
   * @param keysNotApplied keys of the workload with no effect at the end
   */
  public record Result(
      String path,
      List<Integer> rerunsPerKill,
      long extraEffects,
      long keysNotSuccess,
      long keysNotApplied) {
    public int max() {
      return rerunsPerKill.stream().mapToInt(Integer::intValue).max().orElse(0);
    }

    public double mean() {
      return rerunsPerKill.stream().mapToInt(Integer::intValue).average().orElse(0);
    }

    public long sum() {
      return rerunsPerKill.stream().mapToLong(Integer::longValue).sum();
    }

    public boolean consistent() {
      return keysNotSuccess == 0 && keysNotApplied == 0 && extraEffects == sum();
    }
  }

  private CrashWindow() {}

  static Result run(
      BenchBroker broker,
      BenchDatabase database,
      Workload workload,
      boolean claimsPerPoll,
      int kills,
      Random random,
      PrintStream progress)
      throws Exception {
    String path = claimsPerPoll ? "batched (claims per poll)" : "per record";
    emptyTables(database);
    String group =
        "crash-window-" + (claimsPerPoll ? "batched-" : "per-record-") + random.nextInt();
    String[] args = {
      broker.bootstrapServers(),
      database.url(),
      workload.topic(),
      group,
      String.valueOf(claimsPerPoll),
      String.valueOf(LEASE.toMillis()),
      String.valueOf(HANDLER_MILLIS)
    };
    List<Integer> reruns = new ArrayList<>();
    Set<Long> counted = new HashSet<>();
    for (int kill = 1; kill <= kills; kill++) {
      try (ChildJvm consumer = ChildJvm.start(CrashWindowChild.class, args)) {
        consumer.awaitLine("APPLIED", STARTUP);
        Thread.sleep(300 + random.nextInt(2_000));
        consumer.kill();
      }
      awaitKilledStatementsSettled(database);
      int unrecorded = newlyUnrecorded(database, counted);
      reruns.add(unrecorded);
      progress.printf(
          "[bench] crash window, %s: kill %d of %d, %d record(s) applied without SUCCESS%n",
          path, kill, kills, unrecorded);
    }
    try (ChildJvm finisher = ChildJvm.start(CrashWindowChild.class, args)) {
      long deadline = System.nanoTime() + FINISH.toNanos();
      while (successKeys(database) < workload.distinctKeys() && System.nanoTime() < deadline) {
        Thread.sleep(500);
      }
    }
    return tally(database, path, reruns, workload);
  }

  /** Empties the dedup table and (re)creates the table of the children's effects. */
  static void emptyTables(BenchDatabase database) throws Exception {
    DedupTable.truncate(database);
    database.execute("DROP TABLE IF EXISTS crash_effects");
    database.execute(
        "CREATE TABLE crash_effects (id bigserial PRIMARY KEY, order_no text NOT NULL)");
  }

  /** The path's result, from the tables as the last consumer left them. */
  static Result tally(BenchDatabase database, String path, List<Integer> reruns, Workload workload)
      throws Exception {
    // Per key, not in total: a key applied twice would otherwise make up for a key never applied.
    long effects = database.queryForLong("SELECT count(*) FROM crash_effects");
    long keysApplied = database.queryForLong("SELECT count(DISTINCT order_no) FROM crash_effects");
    return new Result(
        path,
        reruns,
        effects - keysApplied,
        workload.distinctKeys() - successKeys(database),
        workload.distinctKeys() - keysApplied);
  }

  /**
   * A statement the killed consumer had already sent (its group-committed SUCCESS marks) still
   * commits on the server after the kill; counting before it settles would count its records as
   * re-run although no handler runs them again.
   */
  private static void awaitKilledStatementsSettled(BenchDatabase database) throws Exception {
    long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
    while (database.queryForLong(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    + " AND pid <> pg_backend_pid() AND state IS DISTINCT FROM 'idle'")
            > 0
        && System.nanoTime() < deadline) {
      Thread.sleep(20);
    }
  }

  /**
   * Effects applied without SUCCESS that no earlier kill counted: a key taken over but not yet
   * re-run, or re-run and killed again, is still unrecorded at the next kill, and only its new
   * effect is a new re-run.
   */
  private static int newlyUnrecorded(BenchDatabase database, Set<Long> counted) throws Exception {
    int added = 0;
    for (long effect :
        database.queryForLongs(
            "SELECT e.id FROM crash_effects e LEFT JOIN consumer_dedup d"
                + " ON d.biz_type = ? AND d.biz_key = e.order_no"
                + " WHERE d.status IS DISTINCT FROM 'SUCCESS'",
            DedupTable.BIZ_TYPE)) {
      if (counted.add(effect)) {
        added++;
      }
    }
    return added;
  }

  private static long successKeys(BenchDatabase database) throws Exception {
    return database.queryForLong("SELECT count(*) FROM consumer_dedup WHERE status = 'SUCCESS'");
  }
}
