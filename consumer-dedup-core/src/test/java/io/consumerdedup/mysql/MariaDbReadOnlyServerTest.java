package io.consumerdedup.mysql;

import static org.assertj.core.api.Assertions.assertThat;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.DedupResult;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.jdbc.TransactionBoundDataSource;
import io.consumerdedup.testing.ConnectionSource;
import io.consumerdedup.testing.TestMariaDb;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.Callable;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Supplier;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * A failover on MariaDB whose address moves a moment late: the pool's connections were opened on
 * the old primary, now running with {@code read_only} (error 1290, SQL state HY000, for every
 * write), while new connections reach the promoted one. One server plays both: {@code read_only} is
 * set for real, and the old primary's connections are those of an account without the READ_ONLY
 * ADMIN privilege, which {@code read_only} stops; the promoted primary's are root's, which it does
 * not.
 *
 * <p>Setting {@code read_only} waits for the server's running statements and then holds every other
 * writer: a transaction of a test beside this one, holding a row another statement waits for, could
 * not write until that statement timed out. So it runs alone ("server-wide").
 */
@Tag("server-wide")
class MariaDbReadOnlyServerTest {
  private String database;
  private String user;
  private final List<HikariDataSource> pools = new ArrayList<>();

  @BeforeEach
  void setUp() throws SQLException {
    database = TestMariaDb.newDatabase("readonly");
    user = "dedup_" + UUID.randomUUID().toString().substring(0, 8);
    try (Connection root = DriverManager.getConnection(TestMariaDb.baseUrl());
        Statement statement = root.createStatement()) {
      statement.execute("CREATE USER '" + user + "'@'%' IDENTIFIED BY 'secret'");
      statement.execute("GRANT ALL ON " + database + ".* TO '" + user + "'@'%'");
    }
  }

  @AfterEach
  void tearDown() throws SQLException {
    pools.forEach(HikariDataSource::close);
    try (Connection root = DriverManager.getConnection(TestMariaDb.baseUrl());
        Statement statement = root.createStatement()) {
      statement.execute("DROP USER IF EXISTS '" + user + "'@'%'");
    }
    TestMariaDb.dropDatabase(database);
  }

  @Test
  void aClaimOnAPoolOpenedOnAServerNowReadOnlyIsAppliedOnceThePrimaryAnswers() throws Exception {
    AtomicBoolean oldPrimary = new AtomicBoolean(true);
    HikariDataSource pool = pool(oldPrimary, 2);
    JdbcDedupStore store =
        JdbcDedupStore.builder(pool).retryMaxDuration(Duration.ofSeconds(3)).build();
    AtomicInteger runs = new AtomicInteger();
    DedupKey key = DedupKey.of("payment", "after-failover-" + UUID.randomUUID());
    List<String> failures = new ArrayList<>();
    DedupResult<Integer> result =
        whileReadOnly(
            oldPrimary,
            () -> {
              try (IdempotentExecutor executor = IdempotentExecutor.builder(store).build()) {
                return deliver(3, failures, () -> executor.execute(key, runs::incrementAndGet));
              }
            });

    assertThat(result)
        .as("[the record, delivered 3 times after the promotion] failures: %s", failures)
        .isNotNull();
    assertThat(result.outcome()).isEqualTo(Outcome.PROCESSED);
    assertThat(runs).as("handler runs").hasValue(1);
  }

  @Test
  void aTransactionOnAPoolOpenedOnAServerNowReadOnlyIsAppliedOnceThePrimaryAnswers()
      throws Exception {
    AtomicBoolean oldPrimary = new AtomicBoolean(true);
    HikariDataSource pool = pool(oldPrimary, 2);
    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(pool);
    JdbcDedupStore store = JdbcDedupStore.builder(transactions).build();
    AtomicInteger runs = new AtomicInteger();
    DedupKey key = DedupKey.of("payment", "in-transaction-" + UUID.randomUUID());
    List<String> failures = new ArrayList<>();
    DedupResult<Integer> result =
        whileReadOnly(
            oldPrimary,
            () -> {
              try (IdempotentExecutor executor =
                  IdempotentExecutor.builder(store).mode(DedupMode.TRANSACTIONAL).build()) {
                // Not tried again within the caller's transaction: each delivery that meets a
                // read-only connection is held, and the next one takes another connection.
                return deliver(
                    4,
                    failures,
                    () ->
                        transactions.inTransaction(
                            () -> executor.execute(key, runs::incrementAndGet)));
              }
            });

    assertThat(result)
        .as("[the record, delivered 4 times after the promotion] failures: %s", failures)
        .isNotNull();
    assertThat(result.outcome()).isEqualTo(Outcome.PROCESSED);
    assertThat(runs).as("handler runs").hasValue(1);
  }

  private static <T> T deliver(int deliveries, List<String> failures, Supplier<T> delivery) {
    for (int i = 0; i < deliveries; i++) {
      try {
        return delivery.get();
      } catch (RuntimeException e) {
        failures.add(e.toString());
      }
    }
    return null;
  }

  /**
   * Runs {@code work} with the server read-only, once the pool's connections are all open on the
   * old primary; connections opened from then on reach the promoted one. Kept as short as the work:
   * the server is shared (root's connections, as other tests', are not stopped by it).
   */
  private <T> T whileReadOnly(AtomicBoolean oldPrimary, Callable<T> work) throws Exception {
    HikariDataSource pool = pools.get(pools.size() - 1);
    long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
    while (pool.getHikariPoolMXBean().getTotalConnections() < pool.getMaximumPoolSize()
        && System.nanoTime() < deadline) {
      Thread.sleep(20);
    }
    assertThat(pool.getHikariPoolMXBean().getTotalConnections())
        .isEqualTo(pool.getMaximumPoolSize());
    try (Connection root = DriverManager.getConnection(TestMariaDb.baseUrl());
        Statement statement = root.createStatement()) {
      statement.execute("SET GLOBAL read_only = ON");
      try {
        oldPrimary.set(false);
        return work.call();
      } finally {
        statement.execute("SET GLOBAL read_only = OFF");
      }
    }
  }

  /**
   * A pool of {@code size} whose connections, while {@code oldPrimary} is set, are the restricted
   * account's, and root's after.
   */
  private HikariDataSource pool(AtomicBoolean oldPrimary, int size) {
    String restricted =
        TestMariaDb.url(database, TestMariaDb.Driver.MARIADB)
            .replace("user=root", "user=" + user + "&password=secret");
    String promoted = TestMariaDb.url(database, TestMariaDb.Driver.MARIADB);
    HikariConfig config = new HikariConfig();
    config.setDataSource(server(() -> oldPrimary.get() ? restricted : promoted));
    config.setMaximumPoolSize(size);
    config.setMinimumIdle(size);
    config.setPoolName("test-" + database);
    HikariDataSource pool = new HikariDataSource(config);
    pools.add(pool);
    return pool;
  }

  /** Opens each connection on the URL that {@code url} names at that moment. */
  private static ConnectionSource server(Supplier<String> url) {
    return new ConnectionSource() {
      @Override
      public Connection getConnection() throws SQLException {
        return DriverManager.getConnection(url.get());
      }
    };
  }
}
