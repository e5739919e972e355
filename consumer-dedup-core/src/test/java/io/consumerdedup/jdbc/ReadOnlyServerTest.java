package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.DedupResult;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.testing.TestDatabase;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * A failover whose address moves a moment late (a cloud endpoint's DNS, a proxy that still routes
 * to the old server, a multi-host URL without {@code targetServerType=primary}): the pool's
 * connections were opened on a server that is now a standby, or is being demoted, and refuse every
 * write with SQL state 25006, while new connections reach the promoted primary. Such connections
 * are valid to the pool, which keeps them for their whole lifetime (30 minutes in HikariCP).
 */
class ReadOnlyServerTest {
  private String schema;
  private final List<HikariDataSource> pools = new ArrayList<>();

  @BeforeEach
  void setUp() {
    schema = TestDatabase.newSchema("readonly");
  }

  @AfterEach
  void tearDown() {
    pools.forEach(HikariDataSource::close);
    TestDatabase.dropSchema(schema);
  }

  @Test
  void aClaimOnAPoolOpenedOnAServerNowReadOnlyIsAppliedOnceThePrimaryAnswers() throws Exception {
    AtomicBoolean standby = new AtomicBoolean(true);
    HikariDataSource pool = pool(standby, 2);
    awaitFull(pool, 2);
    // The standby is promoted (or the address moves to the new primary): connections opened from
    // now on take writes; the pool's two still reach the read-only server.
    standby.set(false);

    JdbcDedupStore store =
        JdbcDedupStore.builder(pool).retryMaxDuration(Duration.ofSeconds(3)).build();
    AtomicInteger runs = new AtomicInteger();
    DedupKey key = DedupKey.of("payment", "after-failover-" + UUID.randomUUID());
    List<String> failures = new ArrayList<>();
    DedupResult<Integer> result = null;
    try (IdempotentExecutor executor = IdempotentExecutor.builder(store).build()) {
      // Three deliveries, as a held record comes back after its hold back-off.
      for (int delivery = 0; delivery < 3 && result == null; delivery++) {
        try {
          result = executor.execute(key, runs::incrementAndGet);
        } catch (RuntimeException e) {
          failures.add(e.toString());
        }
      }
    }

    assertThat(result)
        .as("[the record, delivered 3 times after the promotion] failures: %s", failures)
        .isNotNull();
    assertThat(result.outcome()).isEqualTo(Outcome.PROCESSED);
    assertThat(runs).as("handler runs").hasValue(1);
  }

  @Test
  void aTransactionOnAPoolOpenedOnAServerNowReadOnlyIsAppliedOnceThePrimaryAnswers()
      throws Exception {
    AtomicBoolean standby = new AtomicBoolean(true);
    HikariDataSource pool = pool(standby, 2);
    awaitFull(pool, 2);
    standby.set(false);

    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(pool);
    JdbcDedupStore store = JdbcDedupStore.builder(transactions).build();
    AtomicInteger runs = new AtomicInteger();
    DedupKey key = DedupKey.of("payment", "in-transaction-" + UUID.randomUUID());
    List<String> failures = new ArrayList<>();
    DedupResult<Integer> result = null;
    try (IdempotentExecutor executor =
        IdempotentExecutor.builder(store).mode(DedupMode.TRANSACTIONAL).build()) {
      // A claim in the caller's transaction is not tried again within it: each delivery that
      // meets a read-only connection is held, and the next one takes another connection.
      for (int delivery = 0; delivery < 4 && result == null; delivery++) {
        try {
          result = transactions.inTransaction(() -> executor.execute(key, runs::incrementAndGet));
        } catch (RuntimeException e) {
          failures.add(e.toString());
        }
      }
    }

    assertThat(result)
        .as("[the record, delivered 4 times after the promotion] failures: %s", failures)
        .isNotNull();
    assertThat(result.outcome()).isEqualTo(Outcome.PROCESSED);
    assertThat(runs).as("handler runs").hasValue(1);
  }

  /**
   * A pool of {@code size} whose connections, while {@code standby} is set, are opened read-only,
   * as every session on a hot standby is.
   */
  private HikariDataSource pool(AtomicBoolean standby, int size) {
    PGSimpleDataSource server =
        new PGSimpleDataSource() {
          private static final long serialVersionUID = 1L;

          @Override
          public Connection getConnection(String user, String password) throws SQLException {
            Connection connection = super.getConnection(user, password);
            if (standby.get()) {
              try (Statement statement = connection.createStatement()) {
                statement.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY");
              }
            }
            return connection;
          }
        };
    server.setURL(TestDatabase.url(schema));
    HikariConfig config = new HikariConfig();
    config.setDataSource(server);
    config.setMaximumPoolSize(size);
    config.setPoolName("test-" + schema);
    HikariDataSource pool = new HikariDataSource(config);
    pools.add(pool);
    return pool;
  }

  private static void awaitFull(HikariDataSource pool, int size) throws InterruptedException {
    long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
    while (pool.getHikariPoolMXBean().getTotalConnections() < size
        && System.nanoTime() < deadline) {
      Thread.sleep(20);
    }
    assertThat(pool.getHikariPoolMXBean().getTotalConnections()).isEqualTo(size);
  }
}
