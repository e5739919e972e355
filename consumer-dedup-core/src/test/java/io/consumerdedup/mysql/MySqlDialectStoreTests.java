package io.consumerdedup.mysql;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.catchThrowable;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupAdmin;
import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupInProgressException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupResult;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.core.DedupStoreUnavailableException;
import io.consumerdedup.core.DedupTableMissingException;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.jdbc.JdbcDedupAdmin;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.jdbc.SqlDialect;
import io.consumerdedup.jdbc.TransactionBoundDataSource;
import io.consumerdedup.testing.ConnectionSource;
import io.consumerdedup.testing.TestMariaDb;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executor;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.IntStream;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * What is particular to the MySQL dialect, through one JDBC driver per subclass: detection, times
 * in any session time zone, keys that the server's collations would merge, batches that overlap in
 * any order, lock-wait retries, TRANSACTIONAL copies, renewal of a slow handler's lease and the
 * missing table, on a real server ({@link TestMariaDb}: skipped with a message where there is
 * none). The claim paths, fencing, batches, release, purge and races every store shares are the
 * test kit's {@code DedupStoreContract}, run on MariaDB through both drivers. A database per test
 * class.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
abstract class MySqlDialectStoreTests {
  private static final Duration LEASE = Duration.ofMinutes(1);
  private static final Duration RETENTION = Duration.ofDays(1);

  private String database;
  private HikariDataSource dataSource;
  private JdbcDedupStore store;

  private String server;

  /** The driver this subclass connects with. */
  abstract TestMariaDb.Driver driver();

  /** The server this subclass tests: by default the local MariaDB (or DEDUP_TEST_MARIADB_URL). */
  String server() {
    return TestMariaDb.baseUrl();
  }

  @BeforeAll
  void setUp() throws SQLException {
    server = server();
    database = TestMariaDb.newDatabase(server, driver().name());
    dataSource = TestMariaDb.dataSource(server, database, driver(), 8, null);
    store = JdbcDedupStore.builder(dataSource).build();
    execute("CREATE TABLE charges (order_no VARCHAR(64) NOT NULL, amount DECIMAL(10, 2) NOT NULL)");
  }

  @AfterAll
  void tearDown() {
    if (dataSource != null) {
      dataSource.close();
    }
    if (database != null) {
      TestMariaDb.dropDatabase(server, database);
    }
  }

  private static ClaimRequest request(DedupKey key, String owner) {
    return new ClaimRequest(key, owner, LEASE, RETENTION, null, "orders-0@1");
  }

  private static ClaimRequest request(DedupKey key, String owner, @Nullable String fingerprint) {
    return new ClaimRequest(key, owner, LEASE, RETENTION, fingerprint, "orders-0@1");
  }

  private static ClaimResult.Claimed claimed(ClaimResult result) {
    assertThat(result).isInstanceOf(ClaimResult.Claimed.class);
    return (ClaimResult.Claimed) result;
  }

  private static DedupRecord taken(ClaimResult result) {
    assertThat(result).isInstanceOf(ClaimResult.Taken.class);
    return ((ClaimResult.Taken) result).existing();
  }

  @Test
  void theDialectIsDetectedFromTheConnection() {
    store.find(DedupKey.of("payment", "detect"));
    assertThat(store.dialect()).contains(SqlDialect.MYSQL);
    store.verifyTable();
  }

  @Test
  void renewalExtendsTheLeaseByTheDatabaseClockInAnySessionTimeZone() throws SQLException {
    DedupKey key = DedupKey.of("payment", "renew-1");
    ClaimResult.Claimed claim = claimed(store.claim(request(key, "consumer-a")));

    assertThat(store.renew(claim, Duration.ofHours(2))).isTrue();

    try (Connection connection = dataSource.getConnection();
        Statement statement = connection.createStatement()) {
      statement.execute("SET time_zone = '+13:00'");
      try (ResultSet row =
          statement.executeQuery(
              "SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), lease_until) / 1e6"
                  + " FROM consumer_dedup WHERE biz_key = 'renew-1'")) {
        row.next();
        assertThat(row.getDouble(1)).isBetween(7190.0, 7201.0);
      }
      statement.execute("SET time_zone = DEFAULT");
    }
  }

  @Test
  void hostileKeysAreKeptExactly() {
    DedupKey upper = DedupKey.of("payment", "A-1");
    DedupKey lower = DedupKey.of("payment", "a-1");
    DedupKey accented = DedupKey.of("payment", "á-1");
    DedupKey emoji = DedupKey.of("payment", "🦄-order-💸");
    DedupKey sql = DedupKey.of("payment", "x'); DROP TABLE consumer_dedup; -- \\");
    DedupKey trailing = DedupKey.of("payment", "A-1 ");
    DedupKey huge = DedupKey.of("payment", "k".repeat(10_000));

    for (DedupKey key : List.of(upper, lower, accented, emoji, sql, trailing, huge)) {
      assertThat(claimed(store.claim(request(key, "a"))).token())
          .as("a key of its own: %s", key.bizKey().length() > 40 ? "10,000 chars" : key.bizKey())
          .isEqualTo(1);
      assertThat(store.find(key).orElseThrow().key()).isEqualTo(key);
      assertThat(taken(store.claim(request(key, "b"))).owner()).isEqualTo("a");
    }
    assertThat(huge.bizKey()).startsWith("sha256:");
    assertThat(store.find(DedupKey.of("payment", "🦄-order-💸")).orElseThrow().owner())
        .isEqualTo("a");
  }

  @Test
  void overlappingBatchesInAnyOrderClaimEachKeyOnce() throws Exception {
    int threads = 8;
    List<DedupKey> keys =
        IntStream.range(0, 40).mapToObj(i -> DedupKey.of("batch-race", "k-" + i)).toList();
    ExecutorService pool = Executors.newFixedThreadPool(threads);
    try {
      CountDownLatch start = new CountDownLatch(1);
      List<Future<List<ClaimResult>>> results = new ArrayList<>();
      for (int i = 0; i < threads; i++) {
        List<DedupKey> mine = new ArrayList<>(keys);
        java.util.Collections.shuffle(mine, new java.util.Random(i));
        results.add(
            pool.submit(
                () -> {
                  start.await();
                  return store.claimAll(mine.stream().map(k -> request(k, "b")).toList());
                }));
      }
      start.countDown();
      long claims = 0;
      for (Future<List<ClaimResult>> result : results) {
        claims +=
            result.get(60, TimeUnit.SECONDS).stream()
                .filter(ClaimResult.Claimed.class::isInstance)
                .count();
      }
      assertThat(claims).isEqualTo(keys.size());
    } finally {
      pool.shutdownNow();
    }
  }

  @Test
  void aTransactionalCopyWaitsOnTheKeyAndIsThenSkipped() throws Exception {
    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(dataSource);
    try (IdempotentExecutor executor =
        IdempotentExecutor.builder(JdbcDedupStore.builder(transactions).build())
            .mode(DedupMode.TRANSACTIONAL)
            .build()) {
      CountDownLatch firstInHandler = new CountDownLatch(1);
      CountDownLatch releaseFirst = new CountDownLatch(1);
      CompletableFuture<DedupResult<Object>> first =
          CompletableFuture.supplyAsync(
              () ->
                  deliver(
                      transactions,
                      executor,
                      "ORD-tx-1",
                      () -> {
                        firstInHandler.countDown();
                        releaseFirst.await(30, TimeUnit.SECONDS);
                        return null;
                      },
                      false));
      assertThat(firstInHandler.await(10, TimeUnit.SECONDS)).isTrue();
      CompletableFuture<DedupResult<Object>> copy =
          CompletableFuture.supplyAsync(
              () -> deliver(transactions, executor, "ORD-tx-1", () -> null, false));
      Thread.sleep(300);
      assertThat(copy).as("the copy waits on the uncommitted key").isNotDone();

      releaseFirst.countDown();

      assertThat(first.get(10, TimeUnit.SECONDS).outcome()).isEqualTo(Outcome.PROCESSED);
      assertThat(copy.get(10, TimeUnit.SECONDS).outcome()).isEqualTo(Outcome.DUPLICATE);
      assertThat(charges("ORD-tx-1")).isEqualTo(1);

      // A rollback leaves neither row, and the redelivery applies once.
      assertThatThrownBy(() -> deliver(transactions, executor, "ORD-tx-2", () -> null, true))
          .hasMessage("bank answered 503 after the charge row");
      assertThat(charges("ORD-tx-2")).isZero();
      assertThat(store.find(DedupKey.of("payment", "ORD-tx-2"))).isEmpty();
      assertThat(deliver(transactions, executor, "ORD-tx-2", () -> null, false).outcome())
          .isEqualTo(Outcome.PROCESSED);
      assertThat(charges("ORD-tx-2")).isEqualTo(1);
      assertThat(store.find(DedupKey.of("payment", "ORD-tx-2")).orElseThrow().status())
          .isEqualTo(DedupStatus.SUCCESS);
    }
  }

  @Test
  void aTransactionalClaimOfAKeyAppliedSinceItsTransactionsSnapshotIsRetriedLater()
      throws Exception {
    // MariaDB 11.6 and later default to innodb_snapshot_isolation=ON: a transaction that has read
    // may not lock a row committed after its snapshot, and is told to restart (error 1020), as
    // PostgreSQL's REPEATABLE READ answers 40001.
    try (Connection connection = dataSource.getConnection();
        Statement statement = connection.createStatement()) {
      statement.executeQuery("SELECT @@innodb_snapshot_isolation").close();
    } catch (SQLException e) {
      Assumptions.abort("the server has no innodb_snapshot_isolation: " + e.getMessage());
    }
    DedupKey key = DedupKey.of("payment", "ORD-snapshot-1");
    AtomicInteger runs = new AtomicInteger();
    try (HikariDataSource snapshots =
        TestMariaDb.dataSource(
            server, database, driver(), 2, "SET SESSION innodb_snapshot_isolation = ON")) {
      TransactionBoundDataSource transactions = TransactionBoundDataSource.of(snapshots);
      try (IdempotentExecutor executor =
          IdempotentExecutor.builder(JdbcDedupStore.builder(transactions).build())
              .mode(DedupMode.TRANSACTIONAL)
              .build()) {
        Throwable refused =
            catchThrowable(
                () ->
                    transactions.inTransaction(
                        () -> {
                          // The handler of an earlier record of the poll read in this transaction.
                          try (Connection connection = transactions.getConnection();
                              Statement statement = connection.createStatement()) {
                            statement.executeQuery("SELECT count(*) FROM charges").close();
                          }
                          // Meanwhile another consumer applies the key.
                          assertThat(
                                  store.complete(
                                      claimed(store.claim(request(key, "consumer-a"))), RETENTION))
                              .isTrue();
                          return executor.execute(key, runs::incrementAndGet);
                        }));

        assertThat(refused)
            .as("a transaction to restart, as PostgreSQL's serialization failure: retry later")
            .isInstanceOf(DedupStoreUnavailableException.class)
            .hasMessageContaining("Record has changed since last read");
        assertThat(
                transactions
                    .inTransaction(() -> executor.execute(key, runs::incrementAndGet))
                    .outcome())
            .as("the redelivery, in a new transaction")
            .isEqualTo(Outcome.DUPLICATE);
        assertThat(runs).hasValue(0);
      }
    }
  }

  @Test
  void aClaimWaitingOnALockPastTheLockWaitTimeoutIsRetried() throws Exception {
    DedupKey key = DedupKey.of("payment", "locked-1");
    claimed(store.claim(request(key, "a")));
    expireLease(key);
    try (HikariDataSource impatient =
        TestMariaDb.dataSource(
            server, database, driver(), 2, "SET SESSION innodb_lock_wait_timeout = 1")) {
      JdbcDedupStore impatientStore = JdbcDedupStore.builder(impatient).build();
      try (Connection holder = dataSource.getConnection()) {
        holder.setAutoCommit(false);
        try (Statement statement = holder.createStatement()) {
          statement.executeQuery(
              "SELECT * FROM consumer_dedup WHERE biz_key = 'locked-1' FOR UPDATE");
        }
        CompletableFuture<ClaimResult> claim =
            CompletableFuture.supplyAsync(() -> impatientStore.claim(request(key, "b")));
        Thread.sleep(1_500);
        assertThat(claim).as("waiting on the row lock").isNotDone();
        holder.commit();
        assertThat(claimed(claim.get(20, TimeUnit.SECONDS)).token()).isEqualTo(2);
      }
      assertThat(impatientStore.retry().getMetrics().getNumberOfSuccessfulCallsWithRetryAttempt())
          .as("the lock wait timeout (1205) really happened and was retried")
          .isEqualTo(1);
    }
  }

  @Test
  void aBatchClaimWaitingOnALockPastTheLockWaitTimeoutIsRetriedWithoutClaimingAnyKeyTwice()
      throws Exception {
    DedupKey locked = DedupKey.of("payment", "batch-locked-1");
    DedupKey free = DedupKey.of("payment", "batch-free-1");
    claimed(store.claim(request(locked, "a")));
    expireLease(locked);
    try (HikariDataSource impatient =
        TestMariaDb.dataSource(
            server, database, driver(), 2, "SET SESSION innodb_lock_wait_timeout = 1")) {
      JdbcDedupStore impatientStore = JdbcDedupStore.builder(impatient).build();
      try (Connection holder = dataSource.getConnection()) {
        holder.setAutoCommit(false);
        try (Statement statement = holder.createStatement()) {
          statement.executeQuery(
              "SELECT * FROM consumer_dedup WHERE biz_key = 'batch-locked-1' FOR UPDATE");
        }
        CompletableFuture<List<ClaimResult>> claims =
            CompletableFuture.supplyAsync(
                () -> impatientStore.claimAll(List.of(request(free, "b"), request(locked, "b"))));
        Thread.sleep(1_500);
        assertThat(claims).as("waiting on the row lock").isNotDone();
        holder.commit();
        List<ClaimResult> results = claims.get(20, TimeUnit.SECONDS);
        assertThat(claimed(results.get(0)).token()).as("the free key").isEqualTo(1);
        assertThat(claimed(results.get(1)).token()).as("the locked key").isEqualTo(2);
      }
      assertThat(impatientStore.find(free).orElseThrow().attempts())
          .as("the free key, claimed once though its batch was tried twice")
          .isEqualTo(1);
      assertThat(impatientStore.retry().getMetrics().getNumberOfSuccessfulCallsWithRetryAttempt())
          .as("the lock wait timeout (1205) really happened and was retried")
          .isEqualTo(1);
    }
  }

  @Test
  void aClaimWhoseQueryAnOperatorKillsIsRetried() throws Exception {
    // KILL QUERY (error 1317, "Query execution was interrupted") ends the statement, not the
    // connection or the data: PostgreSQL's pg_cancel_backend (57014) is retried likewise.
    DedupKey key = DedupKey.of("payment", "killed-1");
    JdbcDedupStore killedStore = JdbcDedupStore.builder(dataSource).build();
    claimed(store.claim(request(key, "a")));
    expireLease(key);
    try (Connection holder = dataSource.getConnection();
        Connection operator = dataSource.getConnection()) {
      holder.setAutoCommit(false);
      try (Statement statement = holder.createStatement()) {
        statement.executeQuery(
            "SELECT * FROM consumer_dedup WHERE biz_key = 'killed-1' FOR UPDATE");
      }
      long holderId = connectionId(holder);
      CompletableFuture<ClaimResult> claim =
          CompletableFuture.supplyAsync(() -> killedStore.claim(request(key, "b")), ownThread());
      long waiting = 0;
      for (long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
          waiting == 0 && System.nanoTime() < until; ) {
        Thread.sleep(50);
        waiting = connectionWaitingOn(operator, holderId);
      }
      assertThat(waiting).as("the claim waiting on the row lock: %s", claim).isPositive();
      try (Statement statement = operator.createStatement()) {
        statement.execute("KILL QUERY " + waiting);
      }
      Thread.sleep(300);
      holder.commit();
      assertThat(claimed(claim.get(20, TimeUnit.SECONDS)).token())
          .as("the claim, tried again after its query was killed")
          .isEqualTo(2);
    }
    assertThat(killedStore.retry().getMetrics().getNumberOfSuccessfulCallsWithRetryAttempt())
        .as("the killed query (1317) really happened and was retried")
        .isEqualTo(1);
  }

  @Test
  void aClaimRefusedAConnectionOverItsUsersConnectionLimitIsRetried() throws Exception {
    // An account's max_user_connections (1226, SQL state 42000): the limit of one database user,
    // as PostgreSQL's "too many connections for role" (53300).
    String user = "dedup_limited_" + driver().name().toLowerCase(Locale.ROOT);
    execute("DROP USER IF EXISTS '" + user + "'@'%'");
    execute("CREATE USER '" + user + "'@'%' IDENTIFIED BY 'pw' WITH MAX_USER_CONNECTIONS 1");
    execute("GRANT ALL ON " + database + ".* TO '" + user + "'@'%'");
    try {
      String url =
          TestMariaDb.url(server, database, driver())
              .replaceAll("user=[^&]*", "user=" + user + "&password=pw");
      ConnectionSource limited =
          new ConnectionSource() {
            @Override
            public Connection getConnection() throws SQLException {
              return DriverManager.getConnection(url);
            }
          };
      JdbcDedupStore limitedStore = JdbcDedupStore.builder(limited).build();
      DedupKey key = DedupKey.of("payment", "limited-1");
      CompletableFuture<ClaimResult> claim;
      try (Connection taken = limited.getConnection()) {
        claim =
            CompletableFuture.supplyAsync(() -> limitedStore.claim(request(key, "b")), ownThread());
        Thread.sleep(500);
        assertThat(claim).as("waiting for a connection under the user's limit").isNotDone();
      }
      assertThat(claimed(claim.get(20, TimeUnit.SECONDS)).token()).isEqualTo(1);
      assertThat(limitedStore.retry().getMetrics().getNumberOfSuccessfulCallsWithRetryAttempt())
          .as("the connection refused over the limit (1226) really happened and was retried")
          .isEqualTo(1);
    } finally {
      execute("DROP USER IF EXISTS '" + user + "'@'%'");
    }
  }

  /** A thread of its own: the common pool's one thread on a small machine may be busy. */
  private static Executor ownThread() {
    return task -> new Thread(task, "claiming").start();
  }

  private static long connectionId(Connection connection) throws SQLException {
    try (Statement statement = connection.createStatement();
        ResultSet row = statement.executeQuery("SELECT CONNECTION_ID()")) {
      row.next();
      return row.getLong(1);
    }
  }

  /**
   * The connection whose transaction waits for a lock that {@code holderId}'s transaction holds.
   */
  private static long connectionWaitingOn(Connection operator, long holderId) throws SQLException {
    try (PreparedStatement statement =
        operator.prepareStatement(
            "SELECT waiting.trx_mysql_thread_id FROM information_schema.INNODB_LOCK_WAITS w"
                + " JOIN information_schema.INNODB_TRX waiting"
                + " ON waiting.trx_id = w.requesting_trx_id"
                + " JOIN information_schema.INNODB_TRX holding"
                + " ON holding.trx_id = w.blocking_trx_id"
                + " WHERE holding.trx_mysql_thread_id = ?")) {
      statement.setLong(1, holderId);
      try (ResultSet row = statement.executeQuery()) {
        return row.next() ? row.getLong(1) : 0;
      }
    }
  }

  @Test
  void aBatchClaimWaitsOnlyForItsOwnKeysWhileTheTableIsSmall() throws Exception {
    // A new deployment's table: for a batch of a few keys the server would rather scan the table
    // (or every row of the biz type) than look each key up, and a locking read locks every row it
    // scans.
    execute("CREATE TABLE dedup_new LIKE consumer_dedup");
    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(dataSource);
    JdbcDedupStore transactional =
        JdbcDedupStore.builder(transactions).tableName("dedup_new").build();
    JdbcDedupStore separate =
        JdbcDedupStore.builder(dataSource)
            .tableName("dedup_new")
            .statementTimeout(Duration.ofSeconds(1))
            .retryMaxDuration(Duration.ofSeconds(1))
            .build();
    CountDownLatch claimedInHandler = new CountDownLatch(1);
    CompletableFuture<Void> handlerDone =
        new CompletableFuture<Void>().orTimeout(30, TimeUnit.SECONDS);
    // Another consumer's handler in its transaction (mode TRANSACTIONAL): its key's row stays
    // locked until that transaction ends.
    CompletableFuture<ClaimResult> handler =
        CompletableFuture.supplyAsync(
            () ->
                transactions.inTransaction(
                    () -> {
                      ClaimResult claim =
                          transactional.claimInTransaction(
                              request(DedupKey.of("payment", "ORD-held"), "consumer-a"));
                      claimedInHandler.countDown();
                      handlerDone.join();
                      return claim;
                    }));
    try {
      assertThat(claimedInHandler.await(10, TimeUnit.SECONDS)).isTrue();

      List<ClaimResult> batch =
          separate.claimAll(
              IntStream.rangeClosed(1, 5)
                  .mapToObj(i -> request(DedupKey.of("payment", "ORD-" + i), "consumer-b"))
                  .toList());

      assertThat(batch)
          .as("claimed without waiting for another key's transaction")
          .allSatisfy(result -> assertThat(result).isInstanceOf(ClaimResult.Claimed.class));
    } finally {
      handlerDone.complete(null);
    }
    claimed(handler.get(10, TimeUnit.SECONDS));
  }

  @Test
  void aLargePollIsClaimedAndAnsweredAsDuplicatesWithinTheStatementTimeout() {
    // A consumer polling 10,000 records at a time (max.poll.records): one statement naming every
    // key took the server time that grows faster than the keys, past the statement timeout, at
    // every try, so the poll's claim never went through.
    JdbcDedupStore impatient =
        JdbcDedupStore.builder(dataSource).statementTimeout(Duration.ofSeconds(1)).build();
    List<DedupKey> keys =
        IntStream.range(0, 10_000).mapToObj(i -> DedupKey.of("large-poll", "ORD-" + i)).toList();

    List<ClaimResult> claims =
        impatient.claimAll(keys.stream().map(key -> request(key, "consumer-a")).toList());
    assertThat(claims)
        .as("the poll's claim")
        .hasSize(keys.size())
        .allSatisfy(result -> assertThat(result).isInstanceOf(ClaimResult.Claimed.class));
    List<ClaimResult> redelivered =
        impatient.claimAll(keys.stream().map(key -> request(key, "consumer-b")).toList());
    assertThat(redelivered)
        .as("the same poll delivered to another consumer")
        .allSatisfy(result -> assertThat(taken(result).owner()).isEqualTo("consumer-a"));
  }

  @Test
  void aClaimInTheCallersTransactionThatFailsInALaterStatementLeavesNoneOfItsKeysThere()
      throws Exception {
    // A poll of 600 records in mode TRANSACTIONAL: its claim goes in two statements, and the second
    // one waits on a row another transaction holds until the statement timeout cancels it.
    List<DedupKey> keys =
        IntStream.range(0, 600)
            .mapToObj(i -> DedupKey.of("in-tx-chunks", String.format(Locale.ROOT, "ORD-%04d", i)))
            .toList();
    DedupKey held = keys.get(550);
    claimed(store.claim(request(held, "consumer-a")));
    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(dataSource);
    JdbcDedupStore transactional =
        JdbcDedupStore.builder(transactions).statementTimeout(Duration.ofSeconds(1)).build();
    try (Connection holder = dataSource.getConnection()) {
      holder.setAutoCommit(false);
      try (PreparedStatement lock =
          holder.prepareStatement(
              "SELECT status FROM consumer_dedup WHERE biz_type = ? AND biz_key = ? FOR UPDATE")) {
        lock.setString(1, held.bizType());
        lock.setString(2, held.bizKey());
        lock.executeQuery().close();
      }
      try {
        // The caller catches the store's failure and commits the rest of its work.
        Throwable failure =
            transactions.inTransaction(
                () ->
                    catchThrowable(
                        () ->
                            transactional.claimAllInTransaction(
                                keys.stream().map(key -> request(key, "consumer-b")).toList())));
        assertThat(failure).isInstanceOf(DedupStoreException.class);
      } finally {
        holder.rollback();
      }
    }

    assertThat(keys.subList(0, 500).stream().filter(key -> store.find(key).isPresent()).toList())
        .as("keys of the failed claim's first statement, committed with the caller's work")
        .isEmpty();
    assertThat(claimed(store.claim(request(keys.get(0), "consumer-c"))).token())
        .as("the redelivery of the first record runs its handler")
        .isEqualTo(1);
  }

  /**
   * A disk full (1021), a table that cannot grow (1114, its tablespace on a full disk), a server
   * out of memory (1041), and MySQL 8's 4031, the error a connection that the server closed for
   * inactivity answers (a pool's connection kept longer than wait_timeout): outages that end (space
   * freed, a fresh connection), as PostgreSQL's class 53 is. The server raises them here from a
   * trigger, once; the disconnect of 4031 itself cannot be made on MariaDB, whose own 4031 is an
   * error of CREATE TRIGGER, a statement the store never sends.
   */
  @ParameterizedTest(name = "error {0}")
  @ValueSource(ints = {1021, 1114, 1041, 4031})
  void aServerOutOfSpaceOrMemoryIsAnOutageTheClaimIsTriedAgainThrough(int code)
      throws SQLException {
    String table = "dedup_full_" + code;
    execute("CREATE TABLE " + table + " LIKE consumer_dedup");
    // Not transactional: the failed statement's rollback keeps the count down.
    execute("CREATE TABLE " + table + "_faults (left_to_fail INT NOT NULL) ENGINE=MyISAM");
    execute("INSERT INTO " + table + "_faults VALUES (1)");
    execute(
        "CREATE TRIGGER "
            + table
            + "_full BEFORE INSERT ON "
            + table
            + " FOR EACH ROW BEGIN IF (SELECT left_to_fail FROM "
            + table
            + "_faults) > 0 THEN UPDATE "
            + table
            + "_faults SET left_to_fail = left_to_fail - 1; SIGNAL SQLSTATE 'HY000' SET"
            + " MYSQL_ERRNO = "
            + code
            + ", MESSAGE_TEXT = 'The server is out of space'; END IF; END");
    JdbcDedupStore full =
        JdbcDedupStore.builder(dataSource)
            .tableName(table)
            .retryInitialBackoff(Duration.ofMillis(10))
            .build();

    assertThat(full.claim(request(DedupKey.of("payment", "ORD-full"), "consumer-a")))
        .as("the claim, tried again once the server had room")
        .isInstanceOf(ClaimResult.Claimed.class);
  }

  @Test
  void aDuplicateIsAnsweredFromARead() throws Exception {
    DedupKey key = DedupKey.of("payment", "read-duplicate");
    ClaimResult.Claimed claim = claimed(store.claim(request(key, "a")));
    assertThat(store.complete(claim, RETENTION)).isTrue();
    try (Connection holder = dataSource.getConnection()) {
      holder.setAutoCommit(false);
      try (Statement statement = holder.createStatement()) {
        // Such as a long transaction of an operator's: a claim that locked the row would wait.
        statement.executeQuery(
            "SELECT * FROM consumer_dedup WHERE biz_key = 'read-duplicate' FOR UPDATE");
      }
      CompletableFuture<ClaimResult> duplicate =
          CompletableFuture.supplyAsync(() -> store.claim(request(key, "b")));
      try {
        assertThat(taken(duplicate.get(5, TimeUnit.SECONDS)).status())
            .as("answered while another transaction holds the row locked")
            .isEqualTo(DedupStatus.SUCCESS);
      } finally {
        holder.rollback();
      }
    }
  }

  @Test
  void theNextClaimWritesThePreviousRecordsSuccessInItsCommit() throws Exception {
    try (IdempotentExecutor executor = IdempotentExecutor.builder(store).lease(LEASE).build()) {
      // A mark left waiting 5 ms goes to the writer instead, and a thread starved of CPU between
      // the two claims can outlast that: so the ride is tried a few times, each with its own keys.
      int tries = 0;
      boolean rode = false;
      while (!rode && tries < 10) {
        tries++;
        DedupClaim first = executor.claim(DedupKey.of("payment", "next-a" + tries), null, null);
        CompletableFuture<Void> written = first.completeWithNextClaim();
        DedupClaim second = executor.claim(DedupKey.of("payment", "next-b" + tries), null, null);
        rode = written.isDone();

        written.get(10, TimeUnit.SECONDS);
        assertThat(store.find(DedupKey.of("payment", "next-a" + tries)).orElseThrow().status())
            .isEqualTo(DedupStatus.SUCCESS);
        assertThat(second.isDuplicate()).isFalse();
        assertThat(store.find(DedupKey.of("payment", "next-b" + tries)).orElseThrow().status())
            .isEqualTo(DedupStatus.PROCESSING);
        second.complete();
      }
      assertThat(rode).as("written with the second claim, not later by the writer").isTrue();
    }
  }

  @Test
  void aHandlerRunningPastItsLeaseKeepsTheKeyByRenewingIt() throws Exception {
    DedupKey key = DedupKey.of("payment", "renewed-1");
    Duration lease = Duration.ofSeconds(2);
    AtomicInteger runs = new AtomicInteger();
    CountDownLatch started = new CountDownLatch(1);
    try (IdempotentExecutor holder =
            IdempotentExecutor.builder(store)
                .ownerId("slow-holder")
                .lease(lease)
                .renewalInterval(Duration.ofMillis(500))
                .build();
        IdempotentExecutor other =
            IdempotentExecutor.builder(store).ownerId("other").lease(lease).build()) {
      CompletableFuture<DedupResult<Integer>> slow =
          CompletableFuture.supplyAsync(
              () ->
                  holder.execute(
                      key,
                      () -> {
                        started.countDown();
                        Thread.sleep(lease.multipliedBy(3).toMillis());
                        return runs.incrementAndGet();
                      }));
      assertThat(started.await(10, TimeUnit.SECONDS)).isTrue();
      // Past two whole leases, the key is still the slow holder's: its renewals kept it.
      Thread.sleep(lease.multipliedBy(2).toMillis());
      assertThatThrownBy(() -> other.execute(key, runs::incrementAndGet))
          .isInstanceOf(DedupInProgressException.class)
          .hasMessageContaining("slow-holder");

      assertThat(slow.get(20, TimeUnit.SECONDS).outcome()).isEqualTo(Outcome.PROCESSED);
    }
    assertThat(runs).hasValue(1);
    DedupRecord record = store.find(key).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(record.attempts()).isEqualTo(1);
  }

  @Test
  void aTransactionalClaimWhoseHandlerFailedIsFailedIfTheCallerCommitsAnyway() {
    DedupKey key = DedupKey.of("payment", "ORD-tx-4");
    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(dataSource);
    JdbcDedupStore transactional = JdbcDedupStore.builder(transactions).build();
    transactions.inTransaction(
        () -> {
          ClaimResult.Claimed claim =
              claimed(transactional.claimInTransaction(request(key, "consumer-a")));
          assertThat(transactional.failInTransaction(claim, "item rejected")).isTrue();
          return null;
        });

    DedupRecord record = store.find(key).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(record.lastError()).contains("item rejected");
    claimed(store.claim(request(key, "consumer-b")));
  }

  @Test
  void aKeyThatFailedInASeparateClaimKeepsNoErrorOnceATransactionalClaimSucceeds() {
    DedupKey key = DedupKey.of("payment", "ORD-tx-3");
    ClaimResult.Claimed first = claimed(store.claim(request(key, "consumer-a")));
    assertThat(store.fail(first, "bank timeout", RETENTION)).isTrue();

    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(dataSource);
    JdbcDedupStore transactional = JdbcDedupStore.builder(transactions).build();
    claimed(
        transactions.inTransaction(
            () -> transactional.claimInTransaction(request(key, "consumer-b"))));

    DedupRecord record = store.find(key).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(record.attempts()).isEqualTo(2);
    assertThat(record.lastError()).isEmpty();
  }

  @Test
  void aMissingTableFailsNamingTheTableAndTheSchemaFile() {
    JdbcDedupStore wrong = JdbcDedupStore.builder(dataSource).tableName("no_such_table").build();

    assertThatThrownBy(() -> wrong.claim(request(DedupKey.of("payment", "x"), "a")))
        .isInstanceOf(DedupStoreException.class)
        .hasMessageContaining("claim on table no_such_table failed")
        .hasMessageContaining("42S02")
        .hasMessageContaining("payment/x");
    assertThatThrownBy(wrong::verifyTable)
        .isInstanceOfSatisfying(
            DedupTableMissingException.class,
            missing -> {
              assertThat(missing.tableMissing()).isTrue();
              assertThat(missing.problem())
                  .isEqualTo("The dedup table no_such_table does not exist");
              assertThat(missing.fix()).startsWith("Create it from the schema file");
            })
        .hasMessageContaining("no_such_table does not exist")
        .hasMessageContaining("db/consumer-dedup/mysql/V1__consumer_dedup.sql");
  }

  @Test
  void aTableInAnotherDatabaseIsNamedInsteadOfCreatingASecondOne() {
    // The mysql client run on another database creates the table where the application does not
    // look; a name of this test's own, as the server holds many databases with a consumer_dedup.
    String elsewhere = TestMariaDb.newDatabase(server, "elsewhere");
    String table = "dedup_" + elsewhere;
    try {
      try (Connection connection = DriverManager.getConnection(server);
          Statement statement = connection.createStatement()) {
        statement.execute(
            "RENAME TABLE " + elsewhere + ".consumer_dedup TO " + elsewhere + "." + table);
      } catch (SQLException e) {
        throw new IllegalStateException(e);
      }

      JdbcDedupStore unqualified = JdbcDedupStore.builder(dataSource).tableName(table).build();
      assertThatThrownBy(unqualified::verifyTable)
          .isInstanceOfSatisfying(
              DedupTableMissingException.class,
              missing -> {
                assertThat(missing.tableMissing()).isTrue();
                assertThat(missing.problem())
                    .isEqualTo(
                        "The dedup table "
                            + table
                            + " does not exist where the connection looks for it, but database "
                            + elsewhere
                            + " has a table "
                            + table);
                assertThat(missing.fix())
                    .startsWith(
                        "If that is this application's dedup table, name it with its database:"
                            + " consumer-dedup.table-name="
                            + elsewhere
                            + "."
                            + table);
              });
      JdbcDedupStore.builder(dataSource).tableName(elsewhere + "." + table).build().verifyTable();
    } finally {
      TestMariaDb.dropDatabase(server, elsewhere);
    }
  }

  @Test
  void aTableWhoseKeysCompareAsTextIsNamedAtStartUp() throws SQLException {
    // A table written by hand (or by an ORM) with the server's default text columns: 'A-1' and
    // 'a-1' are one row to it, and the claim of the second such key fails at run time.
    execute(
        TestMariaDb.schemaDdl()
            .replace("CREATE TABLE consumer_dedup", "CREATE TABLE text_keys_dedup")
            .replace("CONSTRAINT consumer_dedup_", "CONSTRAINT text_keys_dedup_")
            .replace("INDEX consumer_dedup_", "INDEX text_keys_dedup_")
            .replace("VARBINARY(256)", "VARCHAR(64) COLLATE utf8mb4_general_ci")
            .replace("VARBINARY(1024)", "VARCHAR(256) COLLATE utf8mb4_general_ci"));
    ch.qos.logback.classic.Logger storeLog =
        (ch.qos.logback.classic.Logger) org.slf4j.LoggerFactory.getLogger(JdbcDedupStore.class);
    ch.qos.logback.core.read.ListAppender<ch.qos.logback.classic.spi.ILoggingEvent> logged =
        new ch.qos.logback.core.read.ListAppender<>();
    logged.start();
    storeLog.addAppender(logged);
    try {
      JdbcDedupStore textKeys =
          JdbcDedupStore.builder(dataSource).tableName("text_keys_dedup").build();
      IdempotentExecutor.builder(textKeys).build().close();
      claimed(textKeys.claim(request(DedupKey.of("payment", "A-1"), "a")));
      assertThatThrownBy(() -> textKeys.claim(request(DedupKey.of("payment", "a-1"), "a")))
          .as("another key, never taken for a duplicate of A-1")
          .isInstanceOf(DedupStoreException.class)
          .hasMessageContaining("must compare byte for byte");
      IdempotentExecutor.builder(JdbcDedupStore.builder(dataSource).build()).build().close();
    } finally {
      storeLog.detachAppender(logged);
    }

    assertThat(
            logged.list.stream()
                .filter(event -> event.getLevel() == ch.qos.logback.classic.Level.WARN)
                .map(ch.qos.logback.classic.spi.ILoggingEvent::getFormattedMessage)
                .filter(message -> message.contains("dedup table"))
                .toList())
        .singleElement()
        .asString()
        .contains(
            "The dedup table text_keys_dedup compares its keys as text (biz_type varchar"
                + " utf8mb4_general_ci, biz_key varchar utf8mb4_general_ci)")
        .contains(
            "ALTER TABLE text_keys_dedup MODIFY biz_type VARBINARY(256) NOT NULL,"
                + " MODIFY biz_key VARBINARY(1024) NOT NULL");
  }

  @Test
  void aConnectionThatSendsTextInASingleByteCharacterSetIsNamedAtStartUpAndByTheClaim()
      throws SQLException {
    Assumptions.assumeTrue(
        driver() == TestMariaDb.Driver.MYSQL, "MariaDB Connector/J sends text as UTF-8 only");
    ch.qos.logback.classic.Logger storeLog =
        (ch.qos.logback.classic.Logger) org.slf4j.LoggerFactory.getLogger(JdbcDedupStore.class);
    ch.qos.logback.core.read.ListAppender<ch.qos.logback.classic.spi.ILoggingEvent> logged =
        new ch.qos.logback.core.read.ListAppender<>();
    logged.start();
    storeLog.addAppender(logged);
    try (HikariDataSource latin1 = latin1DataSource()) {
      JdbcDedupStore latin1Store = JdbcDedupStore.builder(latin1).build();
      IdempotentExecutor.builder(latin1Store).build().close();

      assertThat(
              logged.list.stream()
                  .filter(event -> event.getLevel() == ch.qos.logback.classic.Level.WARN)
                  .map(ch.qos.logback.classic.spi.ILoggingEvent::getFormattedMessage)
                  .filter(message -> message.contains("dedup table"))
                  .toList())
          .as("the start-up's warnings")
          .singleElement()
          .asString()
          .startsWith("The connection to the dedup table consumer_dedup sends text as latin1")
          .contains("Remove characterEncoding from the JDBC URL");
      assertThat(latin1Store.claim(request(DedupKey.of("payment", "ORD-latin1"), "a")))
          .as("a key that latin1 holds")
          .isInstanceOf(ClaimResult.Claimed.class);
      assertThatThrownBy(() -> latin1Store.claim(request(DedupKey.of("payment", "Заказ-1"), "a")))
          .as("a key that latin1 lacks, never taken for another")
          .isInstanceOf(DedupStoreException.class)
          .hasMessageContaining("the driver writes a character of a key that latin1 lacks")
          .hasMessageNotContaining("VARBINARY");
    } finally {
      storeLog.detachAppender(logged);
    }
  }

  /**
   * A legacy application's URL: MySQL Connector/J sends every string in ISO-8859-1, a key in
   * Cyrillic as question marks.
   */
  private HikariDataSource latin1DataSource() {
    com.zaxxer.hikari.HikariConfig config = new com.zaxxer.hikari.HikariConfig();
    config.setJdbcUrl(
        TestMariaDb.url(server, database, driver()) + "&characterEncoding=ISO-8859-1");
    config.setMaximumPoolSize(2);
    return new HikariDataSource(config);
  }

  @Test
  void theAdminThroughASingleByteConnectionFindsReleasesAndForgetsAKeyItCannotSendAsText()
      throws SQLException {
    Assumptions.assumeTrue(
        driver() == TestMariaDb.Driver.MYSQL, "MariaDB Connector/J sends text as UTF-8 only");
    // Claimed by a consumer whose URL sends UTF-8; the operator's tool has the legacy URL.
    DedupKey held = DedupKey.of("payment", "Заказ-held");
    DedupKey done = DedupKey.of("payment", "Заказ-done");
    claimed(store.claim(request(held, "consumer-a")));
    expireLease(held);
    claimed(store.claim(request(done, "consumer-a")));
    try (HikariDataSource latin1 = latin1DataSource()) {
      JdbcDedupStore latin1Store = JdbcDedupStore.builder(latin1).build();
      JdbcDedupAdmin admin = JdbcDedupAdmin.of(latin1Store);
      DedupKey accented = DedupKey.of("payment", "Commande-é");
      claimed(latin1Store.claim(request(accented, "consumer-latin1")));

      assertThat(admin.find(held)).as("the held key, inspected").isPresent();
      DedupAdmin.Change released = admin.release(held, "ops@example.com");
      assertThat(released.applied()).as(released.message()).isTrue();
      assertThat(store.find(held).orElseThrow().status()).isEqualTo(DedupStatus.FAILED);
      DedupAdmin.Change forgotten = admin.forget(done, "ops@example.com", true);
      assertThat(forgotten.applied()).as(forgotten.message()).isTrue();
      assertThat(store.find(done)).as("the forgotten key").isEmpty();
      assertThat(admin.find(accented))
          .as("a key the connection sends, as its own claim wrote it")
          .map(DedupRecord::owner)
          .contains("consumer-latin1");
    }
  }

  @Test
  void theJanitorPurgesExpiredRowsWhateverBytesTheirKeysHold() throws SQLException {
    Assumptions.assumeTrue(
        driver() == TestMariaDb.Driver.MYSQL, "MariaDB Connector/J sends text as UTF-8 only");
    // A legacy consumer's connection writes 'é' as one byte, which is no UTF-8: read through the
    // janitor's UTF-8 connection it became U+FFFD, and bound back it named no row.
    DedupKey accented = DedupKey.of("janitor-bytes", "Commande-é");
    try (HikariDataSource latin1 = latin1DataSource()) {
      JdbcDedupStore latin1Store = JdbcDedupStore.builder(latin1).build();
      assertThat(
              latin1Store.complete(
                  claimed(latin1Store.claim(request(accented, "consumer-latin1"))),
                  Duration.ofMillis(1)))
          .isTrue();
      execute(
          "UPDATE consumer_dedup SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND"
              + " WHERE biz_type = 'janitor-bytes'");

      io.consumerdedup.jdbc.DedupJanitor.builder(store).build().purgeExpired();

      assertThat(latin1Store.find(accented)).as("the expired record of the legacy key").isEmpty();
    }
  }

  /**
   * A legacy URL's connectionCollation, or a server that forces utf8 (utf8mb3) on its clients: a
   * connection that sends text as utf8mb3.
   */
  private HikariDataSource utf8mb3DataSource() {
    com.zaxxer.hikari.HikariConfig config = new com.zaxxer.hikari.HikariConfig();
    if (driver() == TestMariaDb.Driver.MYSQL) {
      config.setJdbcUrl(
          TestMariaDb.url(server, database, driver()) + "&connectionCollation=utf8mb3_general_ci");
    } else {
      config.setJdbcUrl(TestMariaDb.url(server, database, driver()));
      config.setConnectionInitSql("SET NAMES utf8mb3");
    }
    config.setMaximumPoolSize(2);
    return new HikariDataSource(config);
  }

  @Test
  void anOperatorWhoseNameHasAnEmojiReleasesAKeyThroughAConnectionThatSendsUtf8mb3()
      throws SQLException {
    DedupKey key = DedupKey.of("payment", "ORD-utf8mb3-release");
    claimed(store.claim(request(key, "consumer-a")));
    expireLease(key);
    try (HikariDataSource utf8mb3 = utf8mb3DataSource()) {
      JdbcDedupAdmin admin = JdbcDedupAdmin.of(JdbcDedupStore.builder(utf8mb3).build());

      DedupAdmin.Change released = admin.release(key, "ops 🦄 on call");

      assertThat(released.applied()).as(released.message()).isTrue();
      assertThat(store.find(key).orElseThrow().lastError())
          .as("the release's note")
          .hasValueSatisfying(note -> assertThat(note).contains("ops 🦄 on call"));
    }
  }

  @Test
  void aFailureWhoseErrorHasAnEmojiIsRecordedThroughAConnectionThatSendsUtf8mb3() {
    // A legacy URL's connectionCollation, or a server that forces utf8 (utf8mb3) on its clients:
    // an error text with a four-byte character was refused ("Illegal mix of collations"), and a
    // FAILED that cannot be written keeps its key held under a lease renewed until it is.
    try (HikariDataSource utf8mb3 = utf8mb3DataSource()) {
      JdbcDedupStore utf8mb3Store = JdbcDedupStore.builder(utf8mb3).build();
      DedupKey key = DedupKey.of("payment", "ORD-utf8mb3");
      ClaimResult.Claimed claim = claimed(utf8mb3Store.claim(request(key, "consumer-a")));

      assertThat(utf8mb3Store.fail(claim, "card 💳 declined by the bank", RETENTION))
          .as("the handler's failure, recorded")
          .isTrue();
      DedupRecord record = store.find(key).orElseThrow();
      assertThat(record.status()).isEqualTo(DedupStatus.FAILED);
      assertThat(record.lastError()).contains("card 💳 declined by the bank");
      assertThat(claimed(utf8mb3Store.claim(request(key, "consumer-b"))).token())
          .as("the redelivery, retried")
          .isEqualTo(2);

      // And a handler that threw in the caller's transaction (mode TRANSACTIONAL).
      DedupKey item = DedupKey.of("payment", "ORD-utf8mb3-item");
      TransactionBoundDataSource transactions = TransactionBoundDataSource.of(utf8mb3);
      JdbcDedupStore transactional = JdbcDedupStore.builder(transactions).build();
      transactions.inTransaction(
          () ->
              transactional.failInTransaction(
                  claimed(transactional.claimInTransaction(request(item, "consumer-a"))),
                  "item 🦄 rejected"));
      assertThat(store.find(item).orElseThrow().lastError()).contains("item 🦄 rejected");
    }
  }

  private <T> DedupResult<T> deliver(
      TransactionBoundDataSource transactions,
      IdempotentExecutor executor,
      String orderNo,
      Callable<T> beforeCharge,
      boolean failAfterCharge) {
    return transactions.inTransaction(
        () ->
            executor.execute(
                DedupKey.of("payment", orderNo),
                () -> {
                  T value = beforeCharge.call();
                  try (Connection connection = transactions.getConnection();
                      PreparedStatement charge =
                          connection.prepareStatement(
                              "INSERT INTO charges (order_no, amount) VALUES (?, 10.00)")) {
                    charge.setString(1, orderNo);
                    charge.executeUpdate();
                  }
                  if (failAfterCharge) {
                    throw new IllegalStateException("bank answered 503 after the charge row");
                  }
                  return value;
                }));
  }

  private int charges(String orderNo) throws SQLException {
    try (Connection connection = dataSource.getConnection();
        PreparedStatement statement =
            connection.prepareStatement("SELECT count(*) FROM charges WHERE order_no = ?")) {
      statement.setString(1, orderNo);
      try (ResultSet row = statement.executeQuery()) {
        row.next();
        return row.getInt(1);
      }
    }
  }

  private void expireLease(DedupKey key) throws SQLException {
    try (Connection connection = dataSource.getConnection();
        PreparedStatement statement =
            connection.prepareStatement(
                "UPDATE consumer_dedup SET lease_until = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND"
                    + " WHERE biz_type = ? AND biz_key = ?")) {
      statement.setString(1, key.bizType());
      statement.setString(2, key.bizKey());
      assertThat(statement.executeUpdate()).isEqualTo(1);
    }
  }

  private void execute(String sql) throws SQLException {
    try (Connection connection = dataSource.getConnection();
        Statement statement = connection.createStatement()) {
      statement.execute(sql);
    }
  }
}
