package io.consumerdedup.mysql;

import static org.assertj.core.api.Assertions.assertThat;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.jdbc.DedupJanitor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TestMariaDb;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.RepeatedTest;

/**
 * Two janitors (two instances of the application) purge one MariaDB table at the same moment: on
 * MySQL and MariaDB a batch's positions are read first and locked after, skipping the rows the
 * other janitor holds, so both can find their batch short of what was expired.
 */
class MariaDbTwoJanitorsTest {
  private String database;
  private HikariDataSource dataSource;
  private JdbcDedupStore store;

  @BeforeEach
  void setUp() throws SQLException {
    database = TestMariaDb.newDatabase("two_janitors");
    dataSource = TestMariaDb.dataSource(database, TestMariaDb.Driver.MARIADB, 4);
    store = JdbcDedupStore.builder(dataSource).build();
    execute(
        "INSERT INTO consumer_dedup (biz_type, biz_key, status, attempts, owner, created_at,"
            + " updated_at, expires_at) SELECT 'payment', CONCAT('expired-', seq), 'SUCCESS', 1,"
            + " 'old', UTC_TIMESTAMP(6) - INTERVAL 2 HOUR, UTC_TIMESTAMP(6) - INTERVAL 2 HOUR,"
            + " UTC_TIMESTAMP(6) - INTERVAL 1 HOUR FROM seq_1_to_2500");
    execute(
        "INSERT INTO consumer_dedup (biz_type, biz_key, status, attempts, owner, created_at,"
            + " updated_at, expires_at) SELECT 'payment', CONCAT('kept-', seq), 'SUCCESS', 1,"
            + " 'new', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL 7 DAY"
            + " FROM seq_1_to_100");
  }

  @AfterEach
  void tearDown() {
    dataSource.close();
    TestMariaDb.dropDatabase(database);
  }

  @RepeatedTest(5)
  void twoJanitorsAtOnceDeleteEveryExpiredRecordOnceAndKeepTheRest() throws Exception {
    DedupJanitor first = DedupJanitor.builder(store).batchSize(300).build();
    DedupJanitor second = DedupJanitor.builder(store).batchSize(300).build();
    CountDownLatch start = new CountDownLatch(1);

    CompletableFuture<Integer> a = CompletableFuture.supplyAsync(() -> runAfter(start, first));
    CompletableFuture<Integer> b = CompletableFuture.supplyAsync(() -> runAfter(start, second));
    start.countDown();

    int purged = a.get() + b.get();
    assertThat(count("kept-%")).as("unexpired records left").isEqualTo(100);
    assertThat(count("expired-%")).as("expired records left after both runs").isZero();
    assertThat(purged).as("records the two runs purged").isEqualTo(2500);
  }

  private static int runAfter(CountDownLatch start, DedupJanitor janitor) {
    try {
      start.await();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    return janitor.purgeExpired();
  }

  private void execute(String sql) throws SQLException {
    try (Connection connection = dataSource.getConnection();
        Statement statement = connection.createStatement()) {
      statement.execute(sql);
    }
  }

  private int count(String pattern) throws SQLException {
    try (Connection connection = dataSource.getConnection();
        Statement statement = connection.createStatement();
        ResultSet row =
            statement.executeQuery(
                "SELECT count(*) FROM consumer_dedup WHERE biz_key LIKE '" + pattern + "'")) {
      row.next();
      return row.getInt(1);
    }
  }
}
