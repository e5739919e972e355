package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.ChildJvm;
import io.consumerdedup.testing.TestDatabase;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** Guarantee 1 and 2 under contention: the handler runs exactly once per key. */
class ConcurrencyTest {
  private static String schema;
  private static HikariDataSource dataSource;

  @BeforeAll
  static void setUp() throws Exception {
    schema = TestDatabase.newSchema("race");
    dataSource = TestDatabase.dataSource(schema, 16);
    try (Connection connection = dataSource.getConnection();
        Statement statement = connection.createStatement()) {
      statement.execute("CREATE TABLE effects (biz_key text NOT NULL, worker text NOT NULL)");
    }
  }

  @AfterAll
  static void tearDown() {
    dataSource.close();
    TestDatabase.dropSchema(schema);
  }

  @Test
  void thirtyTwoThreadsOnOneKeyRunTheHandlerOncePerRound() throws Exception {
    int threads = 32;
    int rounds = 40;
    JdbcDedupStore store = JdbcDedupStore.builder(dataSource).build();
    Map<String, AtomicInteger> runs = new ConcurrentHashMap<>();
    AtomicInteger processed = new AtomicInteger();
    AtomicInteger duplicates = new AtomicInteger();
    AtomicInteger inProgress = new AtomicInteger();
    ExecutorService pool = Executors.newFixedThreadPool(threads);
    try (IdempotentExecutor executor = IdempotentExecutor.builder(store).build()) {
      for (int round = 0; round < rounds; round++) {
        DedupKey key = DedupKey.of("race-threads", "round-" + round);
        CyclicBarrier start = new CyclicBarrier(threads);
        List<Future<?>> done = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
          done.add(
              pool.submit(
                  () -> {
                    start.await();
                    try {
                      DedupResult<Integer> result =
                          executor.execute(
                              key,
                              () ->
                                  runs.computeIfAbsent(key.bizKey(), k -> new AtomicInteger())
                                      .incrementAndGet());
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

    assertThat(runs).hasSize(rounds);
    assertThat(runs.values()).allSatisfy(count -> assertThat(count).hasValue(1));
    assertThat(processed).hasValue(rounds);
    assertThat(duplicates.get() + inProgress.get()).isEqualTo(rounds * (threads - 1));
  }

  @Test
  void twoJvmsRacingOverTheSameKeysApplyEachOnce() throws Exception {
    int keys = 150;
    String url = TestDatabase.url(schema);
    try (ChildJvm first =
            ChildJvm.start(RaceWorker.class, url, "8", String.valueOf(keys), "jvm-1", "2");
        ChildJvm second =
            ChildJvm.start(RaceWorker.class, url, "8", String.valueOf(keys), "jvm-2", "2")) {
      first.awaitLine("READY", Duration.ofSeconds(60));
      second.awaitLine("READY", Duration.ofSeconds(60));
      first.send("GO");
      second.send("GO");
      first.awaitLine("WORKER-DONE", Duration.ofSeconds(120));
      second.awaitLine("WORKER-DONE", Duration.ofSeconds(120));
      assertThat(first.awaitExit(Duration.ofSeconds(30))).isZero();
      assertThat(second.awaitExit(Duration.ofSeconds(30))).isZero();
    }

    try (Connection connection = dataSource.getConnection();
        Statement statement = connection.createStatement()) {
      try (ResultSet row =
          statement.executeQuery(
              "SELECT count(*), count(DISTINCT biz_key), count(DISTINCT worker) FROM effects"
                  + " WHERE biz_key LIKE 'race-%'")) {
        row.next();
        assertThat(row.getInt(1)).as("effects").isEqualTo(keys);
        assertThat(row.getInt(2)).as("distinct keys applied").isEqualTo(keys);
        assertThat(row.getInt(3)).as("both JVMs won some keys, so they really raced").isEqualTo(2);
      }
    }
  }
}
