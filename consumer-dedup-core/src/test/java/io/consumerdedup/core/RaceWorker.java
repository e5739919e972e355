package io.consumerdedup.core;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.jdbc.JdbcDedupStore;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import javax.sql.DataSource;

/**
 * Runs in a child JVM: {@code threads} threads each deliver every one of {@code keys} keys once,
 * all starting at the same wall-clock moment as the other worker JVMs. Each thread walks the keys
 * in its own shuffled order: in one shared order the thread that ran a key's handler went straight
 * on to the next key while every other thread still backed off, so on a loaded machine one JVM
 * could win every key and the race the test is about did not happen. The handler's effect is a row
 * in {@code effects}, which has no unique constraint: a double run would show as two rows.
 *
 * <p>Connections come from a pool, as in production: a new PostgreSQL connection per store call
 * costs a backend fork, and on a two-core machine sixteen racing threads doing that made the
 * losers' waits back off to a second per key, so the race took minutes instead of seconds.
 */
public final class RaceWorker {
  private RaceWorker() {}

  public static void main(String[] args) throws Exception {
    String url = args[0];
    int threads = Integer.parseInt(args[1]);
    int keys = Integer.parseInt(args[2]);
    String worker = args[3];
    int workers = Integer.parseInt(args[4]);
    HikariConfig config = new HikariConfig();
    config.setJdbcUrl(url);
    // Each thread holds at most a store connection and, inside its handler, an effect connection.
    config.setMaximumPoolSize(2 * threads + 1);
    config.setPoolName("race-" + worker);
    HikariDataSource dataSource = new HikariDataSource(config);
    IdempotentExecutor executor =
        IdempotentExecutor.builder(JdbcDedupStore.builder(dataSource).build())
            .inProgressPolicy(InProgressPolicy.WAIT)
            .build();
    ExecutorService pool = Executors.newFixedThreadPool(threads);
    List<Future<?>> done = new ArrayList<>();
    // Warm up the JDBC driver and the engine before the start, so neither JVM starts late.
    executor.execute(DedupKey.of("race-warm-up", worker), () -> null);
    System.out.println("READY " + worker);
    System.out.flush();
    String go =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
    if (!"GO".equals(go)) {
      throw new IllegalStateException("Expected GO on standard input, got " + go);
    }
    awaitEveryWorker(dataSource, worker, workers);
    for (int t = 0; t < threads; t++) {
      int thread = t;
      done.add(
          pool.submit(
              () -> {
                List<Integer> order = new ArrayList<>();
                for (int k = 0; k < keys; k++) {
                  order.add(k);
                }
                Collections.shuffle(order, new Random((worker + "-" + thread).hashCode()));
                for (int i = 0; i < keys; i++) {
                  String bizKey = "race-" + order.get(i);
                  executor.execute(
                      DedupKey.of("race", bizKey),
                      () -> {
                        try (Connection connection = dataSource.getConnection();
                            PreparedStatement insert =
                                connection.prepareStatement(
                                    "INSERT INTO effects (biz_key, worker) VALUES (?, ?)")) {
                          insert.setString(1, bizKey);
                          insert.setString(2, worker);
                          insert.executeUpdate();
                        }
                        return null;
                      });
                  if (i % 50 == 49) {
                    System.out.println("PROGRESS " + worker + " key " + i);
                  }
                }
                return null;
              }));
    }
    for (Future<?> future : done) {
      future.get();
    }
    pool.shutdown();
    executor.close();
    dataSource.close();
    System.out.println("WORKER-DONE " + worker);
  }

  /**
   * A start line in the database: a JVM that reads GO late (a loaded machine can starve one for a
   * second) would otherwise find every key taken and the race would not happen.
   */
  private static void awaitEveryWorker(DataSource dataSource, String worker, int workers)
      throws SQLException, InterruptedException {
    try (Connection connection = dataSource.getConnection()) {
      try (PreparedStatement arrive =
          connection.prepareStatement(
              "INSERT INTO effects (biz_key, worker) VALUES ('start', ?)")) {
        arrive.setString(1, worker);
        arrive.executeUpdate();
      }
      try (PreparedStatement arrived =
          connection.prepareStatement("SELECT count(*) FROM effects WHERE biz_key = 'start'")) {
        while (true) {
          try (ResultSet row = arrived.executeQuery()) {
            row.next();
            if (row.getInt(1) >= workers) {
              return;
            }
          }
          Thread.sleep(5);
        }
      }
    }
  }
}
