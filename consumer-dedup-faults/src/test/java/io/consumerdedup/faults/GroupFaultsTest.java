package io.consumerdedup.faults;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupInProgressException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupResult;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.ChildJvm;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/**
 * The group changes under load: F5 consumers bounce (a rolling restart, then all killed at once),
 * and F15 many threads of one process claim one key, round after round.
 */
class GroupFaultsTest {
  static final Duration LEASE = Duration.ofSeconds(2);
  static final Duration FINISH = Duration.ofSeconds(60);

  @Test
  void f5BouncesRollingAndAllAtOnce() throws Exception {
    bounces(Target.PLAIN, 300);
  }

  /**
   * F5: while {@code records} are consumed, three rolling restarts, then both consumers killed.
   * Each bounce comes right after a batch of its own was produced and its first effect seen: a
   * bounce of consumers that had finished the topic would interrupt nothing.
   */
  static void bounces(Target target, int records) throws Exception {
    Reliability.scenario(
        target,
        "F5 bounces (rolling, all at once)",
        "SEPARATE",
        true,
        LEASE,
        run -> {
          run.consumerArg("handlerMs", "15");
          int perBounce = records / 10;
          int killed = records - records / 2 - 3 * perBounce;
          run.produce(records / 2, "order-");
          run.watchOffsets();
          List<ChildJvm> slots =
              new ArrayList<>(List.of(run.start("a", null), run.start("b", null)));
          run.awaitFirstEffect(Duration.ofSeconds(60));
          // Rolling: each consumer stops cleanly and comes back.
          for (int bounce = 0; bounce < 3; bounce++) {
            int i = bounce % slots.size();
            produceAndAwaitAnEffect(run, perBounce, "bounce" + bounce + "-");
            run.stop(slots.get(i));
            slots.set(i, run.start(i == 0 ? "a" : "b", null));
            slots.get(i).awaitLine("STARTED", Duration.ofSeconds(30));
            Thread.sleep(1_000);
          }
          // All at once: both killed, both back. FaultRun.kill checks records were left.
          produceAndAwaitAnEffect(run, killed, "killed-");
          for (ChildJvm slot : slots) {
            run.kill(slot);
          }
          long left =
              run.queryLong(
                  "SELECT count(*) FROM consumer_dedup WHERE biz_key LIKE 'killed-%'"
                      + " AND status = 'SUCCESS'");
          run.start("a", null);
          run.start("b", null);
          run.notes.add(
              "5 bounces: 3 clean restarts one after the other, then both consumers killed at once"
                  + " with "
                  + (killed - left)
                  + " of "
                  + killed
                  + " records of the last batch not yet SUCCESS");
          run.awaitDone(FINISH);
        });
  }

  /** Produces {@code count} records and waits until one of them was applied. */
  private static void produceAndAwaitAnEffect(FaultRun run, int count, String prefix)
      throws InterruptedException {
    run.produce(count, prefix);
    long deadline = System.nanoTime() + FINISH.toNanos();
    while (run.queryLong("SELECT count(*) FROM effects WHERE biz_key LIKE ?", prefix + "%") == 0) {
      if (System.nanoTime() > deadline) {
        throw new AssertionError("no record of " + prefix + "* applied within " + FINISH);
      }
      Thread.sleep(10);
    }
  }

  @Test
  void f15ManyThreadsClaimingOneKeyRoundAfterRound() throws Exception {
    manyThreadsOneKey(Target.PLAIN, 1_000);
  }

  /**
   * F15: sixteen threads of this JVM claim one key at once, {@code rounds} keys one after another.
   */
  static void manyThreadsOneKey(Target target, int rounds) throws Exception {
    int threads = 16;
    Reliability.scenario(
        target,
        "F15 " + threads + " threads x " + rounds + " rounds, one key",
        "SEPARATE",
        false,
        LEASE,
        run -> {
          AtomicInteger processed = new AtomicInteger();
          AtomicInteger duplicates = new AtomicInteger();
          AtomicInteger inProgress = new AtomicInteger();
          ExecutorService pool = Executors.newFixedThreadPool(threads);
          try (HikariDataSource dedup = run.pool(threads);
              HikariDataSource effects = run.pool(threads);
              IdempotentExecutor executor =
                  IdempotentExecutor.builder(JdbcDedupStore.builder(dedup).build())
                      .lease(LEASE)
                      .build()) {
            for (int round = 0; round < rounds; round++) {
              DedupKey key = DedupKey.of(FaultConsumer.BIZ_TYPE, "round-" + round);
              CyclicBarrier start = new CyclicBarrier(threads);
              List<Future<?>> done = new ArrayList<>();
              for (int t = 0; t < threads; t++) {
                done.add(
                    pool.submit(
                        () -> {
                          start.await();
                          try {
                            DedupResult<Void> result =
                                executor.execute(
                                    key,
                                    () -> {
                                      try (Connection c = effects.getConnection();
                                          PreparedStatement insert =
                                              c.prepareStatement(
                                                  "INSERT INTO effects (biz_key, consumer)"
                                                      + " VALUES (?, 'threads')")) {
                                        insert.setString(1, key.bizKey());
                                        insert.executeUpdate();
                                      }
                                      return null;
                                    });
                            (result.isDuplicate() ? duplicates : processed).incrementAndGet();
                          } catch (DedupInProgressException e) {
                            inProgress.incrementAndGet();
                          }
                          return null;
                        }));
              }
              for (Future<?> future : done) {
                future.get();
              }
            }
          } finally {
            pool.shutdownNow();
          }
          run.notes.add(
              processed
                  + " handler runs, "
                  + duplicates
                  + " duplicates, "
                  + inProgress
                  + " told in progress, "
                  + (threads * rounds)
                  + " calls");
          if (processed.get() != rounds) {
            run.violation("F15: " + processed + " handler runs for " + rounds + " keys");
          }
        });
  }
}
