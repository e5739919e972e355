package io.consumerdedup.mysql;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupHandlerException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.DedupResult;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.jdbc.TransactionBoundDataSource;
import io.consumerdedup.testing.InnoDbDeadlocks;
import io.consumerdedup.testing.TestMariaDb;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Savepoint;
import java.sql.Statement;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Mode TRANSACTIONAL on MariaDB, a handler that catches a deadlock and carries on. InnoDB rolls the
 * whole transaction back at a deadlock (1213), the dedup row the claim inserted with it, and the
 * handler's next statement opens a new transaction on the same connection: its commit succeeds.
 */
class MariaDbCaughtDeadlockTest {
  private String database;
  private HikariDataSource pool;

  @BeforeEach
  void setUp() throws SQLException {
    database = TestMariaDb.newDatabase("deadlock");
    pool = TestMariaDb.dataSource(database, TestMariaDb.Driver.MARIADB, 4);
    try (Connection connection = pool.getConnection();
        Statement statement = connection.createStatement()) {
      InnoDbDeadlocks.createTables(connection);
      statement.execute(
          "CREATE TABLE ledger (id INT AUTO_INCREMENT PRIMARY KEY, note VARCHAR(64))");
    }
  }

  @AfterEach
  void tearDown() {
    if (pool != null) {
      pool.close();
    }
    TestMariaDb.dropDatabase(database);
  }

  @Test
  void aHandlerThatCatchesADeadlockIsNotPassedAsAppliedWithoutItsDedupRow() throws Exception {
    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(pool);
    JdbcDedupStore store = JdbcDedupStore.builder(transactions).build();
    DedupKey key = DedupKey.of("payment", "deadlock-" + UUID.randomUUID());
    AtomicInteger runs = new AtomicInteger();
    try (IdempotentExecutor executor =
        IdempotentExecutor.builder(store).mode(DedupMode.TRANSACTIONAL).build()) {
      Throwable first =
          catchThrowable(
              () ->
                  transactions.inTransaction(
                      () ->
                          executor.execute(
                              key,
                              () -> {
                                runs.incrementAndGet();
                                return deadlockCaught(transactions);
                              })));

      assertThat(first)
          .as(
              "the record passed as applied; its dedup rows: %d, ledger rows: %d",
              count("consumer_dedup"), count("ledger"))
          .isInstanceOf(IllegalStateException.class)
          .hasMessageContaining("rolled back");
      assertThat(count("ledger")).as("the carried-on write, rolled back").isZero();

      DedupResult<Integer> redelivery =
          transactions.inTransaction(
              () ->
                  executor.execute(
                      key,
                      () -> {
                        runs.incrementAndGet();
                        return ledger(transactions);
                      }));
      assertThat(redelivery.outcome()).isEqualTo(Outcome.PROCESSED);
      DedupResult<Integer> duplicate =
          transactions.inTransaction(() -> executor.execute(key, () -> ledger(transactions)));
      assertThat(duplicate.outcome()).isEqualTo(Outcome.DUPLICATE);
    }
    assertThat(runs).as("handler runs").hasValue(2);
    assertThat(count("ledger")).as("ledger rows").isEqualTo(1);
  }

  /**
   * The handler catches the deadlock, writes, then throws a checked exception. The executor marks
   * the key FAILED in the caller's transaction, which the documentation lets a caller commit
   * anyway; but that transaction is not the handler's any more (InnoDB rolled it back, the claim's
   * row with it), and the caller must hear so rather than commit the handler's later writes alone.
   */
  @Test
  void aHandlerThatCatchesADeadlockThenThrowsACheckedExceptionTellsItsCallerNotToCommit()
      throws Exception {
    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(pool);
    JdbcDedupStore store = JdbcDedupStore.builder(transactions).build();
    DedupKey key = DedupKey.of("payment", "deadlock-checked-" + UUID.randomUUID());
    try (IdempotentExecutor executor =
        IdempotentExecutor.builder(store).mode(DedupMode.TRANSACTIONAL).build()) {
      Throwable first =
          catchThrowable(
              () ->
                  transactions.inTransaction(
                      () ->
                          executor.execute(
                              key,
                              () -> {
                                deadlockCaught(transactions);
                                throw new java.io.IOException("failed after its write");
                              })));

      assertThat(first).isInstanceOf(DedupHandlerException.class);
      assertThat(first.getCause().getSuppressed())
          .as("what the caller hears of its transaction, besides the handler's failure (%s)", first)
          .anySatisfy(
              suppressed ->
                  assertThat(suppressed)
                      .isInstanceOf(IllegalStateException.class)
                      .hasMessageContaining("rolled back the transaction of the claim"));
      assertThat(count("ledger")).as("ledger rows, the transaction rolled back").isZero();
      assertThat(store.find(key)).as("the key's record").isEmpty();
    }
  }

  /**
   * Several keys in one transaction, as the documentation allows: the caller goes on past a key
   * whose handler threw and commits the rest. That handler had caught a deadlock, so InnoDB had
   * rolled the transaction back (the claims' rows and the first key's write with it) and its later
   * write went on in a new transaction: committed, that write was applied alone, with no dedup row,
   * and applied again by the key's next delivery. TransactionBoundDataSource refuses that commit.
   */
  @Test
  void aCallerThatGoesOnPastAKeyWhoseHandlerCaughtADeadlockCommitsNoWriteWithoutItsDedupRow()
      throws Exception {
    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(pool);
    JdbcDedupStore store = JdbcDedupStore.builder(transactions).build();
    DedupKey applied = DedupKey.of("payment", "deadlock-order-a-" + UUID.randomUUID());
    DedupKey failing = DedupKey.of("payment", "deadlock-order-b-" + UUID.randomUUID());
    try (IdempotentExecutor executor =
        IdempotentExecutor.builder(store).mode(DedupMode.TRANSACTIONAL).build()) {
      Throwable commit =
          catchThrowable(
              () ->
                  transactions.inTransaction(
                      () -> {
                        executor.execute(applied, () -> ledger(transactions));
                        try {
                          executor.execute(
                              failing,
                              () -> {
                                deadlockCaught(transactions);
                                throw new java.io.IOException("failed after its write");
                              });
                        } catch (DedupHandlerException itemFailed) {
                          // goes on past the failed key; its next delivery is to retry it
                        }
                        return null;
                      }));

      assertThat(count("ledger"))
          .as(
              "ledger rows committed with no dedup row (dedup rows: %d; the commit: %s)",
              count("consumer_dedup"), commit)
          .isZero();
      assertThat(commit)
          .isInstanceOf(IllegalStateException.class)
          .hasMessageContaining("rolled back the transaction of the claim on " + applied);

      // The redelivery of both keys applies each once.
      transactions.inTransaction(
          () -> {
            executor.execute(applied, () -> ledger(transactions));
            return executor.execute(failing, () -> ledger(transactions));
          });
      assertThat(store.find(applied).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
      assertThat(store.find(failing).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
    }
    assertThat(count("ledger")).as("ledger rows, one per key").isEqualTo(2);
  }

  /**
   * A caller that undoes a failed key by a rollback to a savepoint takes its claim out on purpose:
   * the commit's check of the claims must not take that for InnoDB's rollback and refuse the rest.
   */
  @Test
  void aKeyUndoneByARollbackToASavepointDoesNotRefuseTheCommitOfTheRest() throws Exception {
    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(pool);
    JdbcDedupStore store = JdbcDedupStore.builder(transactions).build();
    DedupKey undone = DedupKey.of("payment", "savepoint-undone-" + UUID.randomUUID());
    DedupKey applied = DedupKey.of("payment", "savepoint-applied-" + UUID.randomUUID());
    try (IdempotentExecutor executor =
        IdempotentExecutor.builder(store).mode(DedupMode.TRANSACTIONAL).build()) {
      transactions.inTransaction(
          () -> {
            Connection connection = transactions.getConnection();
            Savepoint beforeItem = connection.setSavepoint();
            try {
              executor.execute(
                  undone,
                  () -> {
                    ledger(transactions);
                    throw new java.io.IOException("failed after its write");
                  });
            } catch (DedupHandlerException itemFailed) {
              connection.rollback(beforeItem); // its write and its claim undone
            }
            return executor.execute(applied, () -> ledger(transactions));
          });
      assertThat(store.find(undone)).as("the undone key's record").isEmpty();
      assertThat(store.find(applied).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
    }
    assertThat(count("ledger")).as("ledger rows: the applied key's").isEqualTo(1);
  }

  /** Is the victim of a deadlock, catches it and carries on with a write of its own. */
  private int deadlockCaught(TransactionBoundDataSource transactions) throws Exception {
    try {
      InnoDbDeadlocks.deadlock(transactions.getConnection(), pool);
    } catch (SQLException deadlock) {
      // carries on
    }
    return ledger(transactions);
  }

  private static int ledger(TransactionBoundDataSource transactions) throws SQLException {
    try (PreparedStatement insert =
        transactions.getConnection().prepareStatement("INSERT INTO ledger (note) VALUES (?)")) {
      insert.setString(1, "applied");
      return insert.executeUpdate();
    }
  }

  private int count(String table) throws SQLException {
    try (Connection connection = pool.getConnection();
        Statement statement = connection.createStatement();
        ResultSet rows = statement.executeQuery("SELECT COUNT(*) FROM " + table)) {
      rows.next();
      return rows.getInt(1);
    }
  }
}
