package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.DedupResult;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.testing.TestPgBouncer;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.IntStream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.postgresql.PGConnection;

/**
 * The store through a real PgBouncer in transaction pool mode, on the JDBC URL a user writes: its
 * own statements work (no named server-side statement meets another client's), and mode
 * TRANSACTIONAL, whose handler statements the store does not build, is refused at start-up unless
 * the URL has {@code prepareThreshold=0}, and then works.
 */
class PgBouncerStoreTest {
  private static final Duration LEASE = Duration.ofMinutes(1);
  private static final Duration KEEP = Duration.ofDays(1);

  private String schema;
  private String table;
  private final List<HikariDataSource> pools = new ArrayList<>();

  @BeforeEach
  void setUp() {
    schema = TestPgBouncer.newSchema("pgbouncer");
    table = schema + ".consumer_dedup";
  }

  @AfterEach
  void tearDown() {
    pools.forEach(HikariDataSource::close);
    if (schema != null) {
      TestPgBouncer.dropSchema(schema);
    }
  }

  private HikariDataSource pool(String url) {
    HikariDataSource pool = TestPgBouncer.dataSource(url, 4);
    pools.add(pool);
    return pool;
  }

  @Test
  void concurrentConsumersClaimEachKeyOnceWithoutStatementErrors() throws Exception {
    // Two consumers, each with its own pool: 8 client connections over PgBouncer's server ones.
    List<JdbcDedupStore> consumers =
        List.of(
            JdbcDedupStore.builder(pool(TestPgBouncer.url())).tableName(table).build(),
            JdbcDedupStore.builder(pool(TestPgBouncer.url())).tableName(table).build());
    try (Connection connection = pools.get(0).getConnection()) {
      assertThat(TestPgBouncer.pooled(connection))
          .as("the store's connections are pooled")
          .isTrue();
    }
    Map<DedupKey, AtomicInteger> claims = new ConcurrentHashMap<>();
    List<Throwable> errors = new ArrayList<>();
    ExecutorService threads = Executors.newFixedThreadPool(8);
    try {
      List<Future<?>> work = new ArrayList<>();
      for (int thread = 0; thread < 8; thread++) {
        JdbcDedupStore store = consumers.get(thread % 2);
        work.add(
            threads.submit(
                () -> {
                  // Every consumer sees every key, one at a time and in polls of 10 keys: each
                  // statement text runs far more often than pgjdbc's threshold for naming it.
                  for (int poll = 0; poll < 15; poll++) {
                    List<ClaimRequest> requests =
                        IntStream.range(0, 10)
                            .mapToObj(i -> request(DedupKey.of("batch", "b" + i)))
                            .toList();
                    settle(store, store.claimAll(requests), claims);
                  }
                  for (int i = 0; i < 150; i++) {
                    settle(
                        store, List.of(store.claim(request(DedupKey.of("one", "o" + i)))), claims);
                  }
                  return null;
                }));
      }
      for (Future<?> future : work) {
        try {
          future.get();
        } catch (java.util.concurrent.ExecutionException e) {
          errors.add(e.getCause());
        }
      }
    } finally {
      threads.shutdownNow();
    }
    assertThat(errors).as("store calls that failed").isEmpty();
    // Not even a retried one: a statement error would have been retried as transient.
    for (JdbcDedupStore store : consumers) {
      assertThat(store.retry().getMetrics().getNumberOfSuccessfulCallsWithRetryAttempt())
          .as("store calls retried")
          .isZero();
    }
    assertThat(claims).hasSize(160);
    assertThat(claims.values()).allSatisfy(count -> assertThat(count).hasValue(1));
    try (Connection connection = pools.get(0).getConnection();
        Statement statement = connection.createStatement();
        ResultSet row =
            statement.executeQuery(
                "SELECT count(*) FROM " + table + " WHERE status = 'SUCCESS' AND attempts = 1")) {
      row.next();
      assertThat(row.getInt(1)).isEqualTo(160);
    }
  }

  @Test
  void groupsOfRenewalsAndReleasesRunAsBatchesWithoutStatementErrors() throws Exception {
    List<JdbcDedupStore> consumers =
        List.of(
            JdbcDedupStore.builder(pool(TestPgBouncer.url())).tableName(table).build(),
            JdbcDedupStore.builder(pool(TestPgBouncer.url())).tableName(table).build());
    try (Connection connection = pools.get(0).getConnection()) {
      assertThat(TestPgBouncer.pooled(connection))
          .as("the store's connections are pooled")
          .isTrue();
    }
    List<Throwable> errors = new ArrayList<>();
    ExecutorService threads = Executors.newFixedThreadPool(8);
    try {
      List<Future<?>> work = new ArrayList<>();
      for (int thread = 0; thread < 8; thread++) {
        JdbcDedupStore store = consumers.get(thread % 2);
        String prefix = "t" + thread + "-";
        work.add(
            threads.submit(
                () -> {
                  List<DedupKey> keys =
                      IntStream.range(0, 20)
                          .mapToObj(i -> DedupKey.of("group", prefix + i))
                          .toList();
                  // Half the keys failed once: their claims are re-claims (token 2), whose release
                  // restores FAILED; the others' claims created them, and their release deletes.
                  for (DedupKey key : keys.subList(0, 10)) {
                    ClaimResult.Claimed first = (ClaimResult.Claimed) store.claim(request(key));
                    assertThat(store.fail(first, "first try", KEEP)).isTrue();
                  }
                  // Each group is one batch of one statement text, run far more often than
                  // pgjdbc's threshold for naming it.
                  for (int round = 0; round < 10; round++) {
                    List<ClaimResult.Claimed> claimed =
                        store
                            .claimAll(keys.stream().map(PgBouncerStoreTest::request).toList())
                            .stream()
                            .map(ClaimResult.Claimed.class::cast)
                            .toList();
                    for (int renewal = 0; renewal < 3; renewal++) {
                      assertThat(store.renewAll(claimed, LEASE)).as("renewals lost").isEmpty();
                    }
                    assertThat(store.releaseAll(claimed)).as("claims not released").isEmpty();
                  }
                  return null;
                }));
      }
      for (Future<?> future : work) {
        try {
          future.get();
        } catch (java.util.concurrent.ExecutionException e) {
          errors.add(e.getCause());
        }
      }
    } finally {
      threads.shutdownNow();
    }
    assertThat(errors).as("store calls that failed").isEmpty();
    for (JdbcDedupStore store : consumers) {
      assertThat(store.retry().getMetrics().getNumberOfSuccessfulCallsWithRetryAttempt())
          .as("store calls retried")
          .isZero();
    }
    try (Connection connection = pools.get(0).getConnection();
        Statement statement = connection.createStatement();
        ResultSet row =
            statement.executeQuery(
                "SELECT count(*) FILTER (WHERE status = 'FAILED' AND attempts = 1), count(*) FROM "
                    + table)) {
      row.next();
      assertThat(row.getInt(1)).as("re-claims released back to FAILED").isEqualTo(80);
      assertThat(row.getInt(2)).as("rows left: the keys' first claims were released").isEqualTo(80);
    }
  }

  private static ClaimRequest request(DedupKey key) {
    return new ClaimRequest(key, "consumer", LEASE, KEEP, null, null);
  }

  /** Completes the keys claimed, counting the claims per key. */
  private static void settle(
      JdbcDedupStore store, List<ClaimResult> results, Map<DedupKey, AtomicInteger> claims) {
    List<ClaimResult.Claimed> claimed = new ArrayList<>();
    for (ClaimResult result : results) {
      if (result instanceof ClaimResult.Claimed c) {
        claimed.add(c);
        claims.computeIfAbsent(c.key(), k -> new AtomicInteger()).incrementAndGet();
      }
    }
    assertThat(store.completeAll(claimed, KEEP)).as("completions whose lease was lost").isEmpty();
  }

  @Test
  void transactionalModeIsRefusedAtStartUpWithNamedStatementsOnTheUrl() {
    TransactionBoundDataSource transactions =
        TransactionBoundDataSource.of(pool(TestPgBouncer.url()));
    JdbcDedupStore store = JdbcDedupStore.builder(transactions).tableName(table).build();

    assertThatThrownBy(
            () -> IdempotentExecutor.builder(store).mode(DedupMode.TRANSACTIONAL).build())
        .isInstanceOf(DedupConfigurationException.class)
        .hasMessageContaining("connection pooler")
        .hasMessageContaining("prepareThreshold=0");
    // Mode SEPARATE on the same URL starts: the store's own statements are unnamed.
    IdempotentExecutor.builder(
            JdbcDedupStore.builder(pool(TestPgBouncer.url())).tableName(table).build())
        .build()
        .close();
  }

  @Test
  void transactionalModeWorksWithPrepareThresholdZero() throws Exception {
    HikariDataSource pool = pool(TestPgBouncer.url("prepareThreshold=0"));
    try (Connection connection = pool.getConnection();
        Statement statement = connection.createStatement()) {
      statement.execute("CREATE TABLE " + schema + ".charges (order_no text NOT NULL)");
    }
    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(pool);
    try (IdempotentExecutor executor =
        IdempotentExecutor.builder(JdbcDedupStore.builder(transactions).tableName(table).build())
            .mode(DedupMode.TRANSACTIONAL)
            .build()) {
      AtomicInteger applied = new AtomicInteger();
      ExecutorService threads = Executors.newFixedThreadPool(4);
      try {
        List<Future<?>> work = new ArrayList<>();
        for (int thread = 0; thread < 4; thread++) {
          work.add(
              threads.submit(
                  () -> {
                    for (int i = 0; i < 40; i++) {
                      String orderNo = "order-" + i;
                      DedupResult<String> result =
                          transactions.inTransaction(
                              () ->
                                  executor.execute(
                                      DedupKey.of("payment", orderNo),
                                      () -> {
                                        try (Connection c = transactions.getConnection();
                                            PreparedStatement insert =
                                                c.prepareStatement(
                                                    "INSERT INTO "
                                                        + schema
                                                        + ".charges VALUES (?)")) {
                                          insert.setString(1, orderNo);
                                          insert.executeUpdate();
                                        }
                                        applied.incrementAndGet();
                                        return orderNo;
                                      }));
                      assertThat(result).isNotNull();
                    }
                    return null;
                  }));
        }
        for (Future<?> future : work) {
          future.get();
        }
      } finally {
        threads.shutdownNow();
      }
      assertThat(applied).hasValue(40);
      try (Connection connection = pool.getConnection();
          Statement statement = connection.createStatement();
          ResultSet row =
              statement.executeQuery(
                  "SELECT count(*), count(DISTINCT order_no) FROM " + schema + ".charges")) {
        row.next();
        assertThat(row.getInt(1)).isEqualTo(40);
        assertThat(row.getInt(2)).isEqualTo(40);
      }
    }
  }

  /**
   * The retention purge sends its planner settings in one text with each statement, local to that
   * transaction: through the pooler the janitor's batches, its backlog count and the one-shot purge
   * work, and no server connection is handed on with the settings (every one of them answers the
   * server's own afterwards).
   */
  @Test
  void thePurgeWorksThroughThePoolerAndLeavesNoPlannerSettingBehind() throws Exception {
    HikariDataSource pool = pool(TestPgBouncer.url());
    JdbcDedupStore store = JdbcDedupStore.builder(pool).tableName(table).build();
    try (Connection connection = pool.getConnection();
        Statement statement = connection.createStatement()) {
      statement.execute(
          "INSERT INTO "
              + table
              + " (biz_type, biz_key, status, owner, created_at, expires_at)"
              + " SELECT 'order', 'k-' || g, 'SUCCESS', 'consumer-a',"
              + " now() - interval '2 days' + g * interval '1 ms', now() - interval '1 day'"
              + " FROM generate_series(1, 2500) g");
    }
    DedupJanitor janitor = DedupJanitor.builder(store).batchSize(250).maxBatchesPerRun(4).build();

    assertThat(store.purge(400)).as("rows the one-shot purge deleted").isEqualTo(400);
    assertThat(janitor.measureBacklog().orElseThrow().expiredRows()).isEqualTo(2_100);
    int deleted = 0;
    for (int run = janitor.purgeExpired(); run > 0; run = janitor.purgeExpired()) {
      deleted += run;
    }
    assertThat(deleted).as("rows the janitor deleted").isEqualTo(2_100);
    assertThat(janitor.measureBacklog().orElseThrow().expiredRows()).isZero();

    // Each of the pool's connections at once, so that they hold every server connection PgBouncer
    // lends them: none of them kept a setting of the purge.
    List<Connection> held = new ArrayList<>();
    try {
      for (int i = 0; i < 4; i++) {
        Connection connection = pool.getConnection();
        held.add(connection);
        // Its ROLLBACK, run often enough on this connection, would be named S_1 by pgjdbc, and a
        // server connection PgBouncer keeps across runs may hold an S_1 of another client already.
        connection.unwrap(PGConnection.class).setPrepareThreshold(0);
        connection.setAutoCommit(false);
      }
      for (Connection connection : held) {
        try (Statement statement = connection.createStatement();
            ResultSet row =
                statement.executeQuery(
                    "SELECT current_setting('enable_seqscan'), current_setting('enable_sort'),"
                        + " current_setting('jit')")) {
          row.next();
          assertThat(row.getString(1) + " " + row.getString(2))
              .as("a server connection after the purge")
              .isEqualTo("on on");
        }
      }
    } finally {
      for (Connection connection : held) {
        connection.rollback();
        connection.close();
      }
    }
  }
}
