package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.catchThrowable;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.jdbc.TransactionBoundDataSource;
import io.consumerdedup.testing.TestDatabase;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * DedupMode.TRANSACTIONAL: the dedup row commits or rolls back with the handler's own writes, in a
 * plain JDBC transaction opened by {@link TransactionBoundDataSource}.
 */
class TransactionalModeTest {
  private static String schema;
  private static HikariDataSource pool;
  private static TransactionBoundDataSource transactions;
  private static IdempotentExecutor executor;

  @BeforeAll
  static void setUp() throws SQLException {
    schema = TestDatabase.newSchema("transactional");
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement()) {
      statement.execute("CREATE TABLE charges (order_no text NOT NULL, amount numeric NOT NULL)");
    }
    pool = TestDatabase.dataSource(schema, 4);
    transactions = TransactionBoundDataSource.of(pool);
    executor =
        IdempotentExecutor.builder(JdbcDedupStore.builder(transactions).build())
            .mode(DedupMode.TRANSACTIONAL)
            .build();
  }

  @AfterAll
  static void tearDown() {
    executor.close();
    pool.close();
    TestDatabase.dropSchema(schema);
  }

  /** Runs one delivery the way a transactional consumer does: begin, handle, commit. */
  private static <T> DedupResult<T> deliverInTransaction(
      String orderNo, Callable<T> handlerBeforeCharge, boolean failAfterCharge) {
    return transactions.inTransaction(
        () ->
            executor.execute(
                DedupKey.of("payment", orderNo),
                () -> {
                  T value = handlerBeforeCharge.call();
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

  private static int count(String sql, String orderNo) throws SQLException {
    try (Connection connection = TestDatabase.connect(schema);
        PreparedStatement statement = connection.prepareStatement(sql)) {
      statement.setString(1, orderNo);
      try (ResultSet row = statement.executeQuery()) {
        row.next();
        return row.getInt(1);
      }
    }
  }

  private static int charges(String orderNo) throws SQLException {
    return count("SELECT count(*) FROM charges WHERE order_no = ?", orderNo);
  }

  private static int dedupRows(String orderNo) throws SQLException {
    return count("SELECT count(*) FROM consumer_dedup WHERE biz_key = ?", orderNo);
  }

  @Test
  void aRollbackLeavesNeitherTheBusinessRowNorTheDedupRowAndTheRedeliveryAppliesOnce()
      throws SQLException {
    assertThatThrownBy(() -> deliverInTransaction("ORD-tx-1", () -> null, true))
        .isInstanceOf(IllegalStateException.class)
        .hasMessage("bank answered 503 after the charge row");
    assertThat(charges("ORD-tx-1")).isZero();
    assertThat(dedupRows("ORD-tx-1")).isZero();

    DedupResult<Object> redelivery = deliverInTransaction("ORD-tx-1", () -> null, false);
    DedupResult<Object> duplicate = deliverInTransaction("ORD-tx-1", () -> null, false);

    assertThat(redelivery.outcome()).isEqualTo(Outcome.PROCESSED);
    assertThat(duplicate.outcome()).isEqualTo(Outcome.DUPLICATE);
    assertThat(charges("ORD-tx-1")).isEqualTo(1);
    assertThat(
            count(
                "SELECT count(*) FROM consumer_dedup WHERE biz_key = ? AND status = 'SUCCESS'",
                "ORD-tx-1"))
        .isEqualTo(1);
  }

  @Test
  void aConcurrentCopyWaitsOnTheKeyAndIsThenSkipped() throws Exception {
    CountDownLatch firstInHandler = new CountDownLatch(1);
    CountDownLatch releaseFirst = new CountDownLatch(1);
    CompletableFuture<DedupResult<Object>> first =
        CompletableFuture.supplyAsync(
            () ->
                deliverInTransaction(
                    "ORD-tx-2",
                    () -> {
                      firstInHandler.countDown();
                      releaseFirst.await(30, TimeUnit.SECONDS);
                      return null;
                    },
                    false));
    assertThat(firstInHandler.await(10, TimeUnit.SECONDS)).isTrue();
    CompletableFuture<DedupResult<Object>> copy =
        CompletableFuture.supplyAsync(() -> deliverInTransaction("ORD-tx-2", () -> null, false));
    Thread.sleep(300);
    assertThat(copy).as("the copy waits on the uncommitted key").isNotDone();

    releaseFirst.countDown();

    assertThat(first.get(10, TimeUnit.SECONDS).outcome()).isEqualTo(Outcome.PROCESSED);
    assertThat(copy.get(10, TimeUnit.SECONDS).outcome()).isEqualTo(Outcome.DUPLICATE);
    assertThat(charges("ORD-tx-2")).isEqualTo(1);
  }

  @Test
  void anItemWhoseHandlerThrewInsideACommittedTransactionIsRetriedByItsNextDelivery()
      throws SQLException {
    // An order's handler applies each line item under its own key in the order's transaction,
    // and goes on when one item fails, as it would in mode SEPARATE, where that item is FAILED.
    transactions.inTransaction(
        () -> {
          deliverItem("ORD-tx-5-a", false);
          try {
            deliverItem("ORD-tx-5-b", true);
          } catch (IllegalStateException itemFailed) {
            // the order goes on; the item's next delivery is to retry it
          }
          return null;
        });
    assertThat(charges("ORD-tx-5-a")).isEqualTo(1);

    DedupResult<Object> retry = deliverInTransaction("ORD-tx-5-b", () -> null, false);

    assertThat(retry.outcome())
        .as("the next delivery of the item whose handler threw")
        .isEqualTo(Outcome.PROCESSED);
    assertThat(charges("ORD-tx-5-b"))
        .as("the failed attempt's charge, committed with the order, and the retry's")
        .isEqualTo(2);
  }

  /**
   * PostgreSQL's side of a handler that catches a failed statement, goes on, and throws, under a
   * caller that goes on past the failed item and commits the rest: the failed statement aborted the
   * whole transaction (unlike InnoDB, which rolls it back and lets the next statement open a new
   * one), so no later write of the handler can land, and the commit is refused rather than reported
   * done with nothing committed.
   */
  @Test
  void anItemWhoseHandlerCaughtAFailedStatementLeavesNothingOfTheOrderCommittedAndSaysSo()
      throws SQLException {
    Throwable commit =
        catchThrowable(
            () ->
                transactions.inTransaction(
                    () -> {
                      deliverItem("ORD-tx-6-a", false);
                      try {
                        executor.execute(
                            DedupKey.of("payment", "ORD-tx-6-b"),
                            () -> {
                              try (Connection connection = transactions.getConnection();
                                  Statement audit = connection.createStatement()) {
                                audit.executeUpdate(
                                    "INSERT INTO charges (order_no, amount) VALUES ('audit', NULL)");
                              } catch (SQLException optionalAuditFailed) {
                                // goes on without its audit row
                              }
                              try (Connection connection = transactions.getConnection();
                                  PreparedStatement charge =
                                      connection.prepareStatement(
                                          "INSERT INTO charges (order_no, amount) VALUES (?, 1)")) {
                                charge.setString(1, "ORD-tx-6-b");
                                charge.executeUpdate();
                              }
                              throw new java.io.IOException("failed after its charge");
                            });
                      } catch (RuntimeException itemFailed) {
                        // the order goes on; the item's next delivery is to retry it
                      }
                      return null;
                    }));

    assertThat(commit)
        .as("what the caller hears of its order's commit")
        .isInstanceOf(IllegalStateException.class)
        .hasMessageContaining("aborted the transaction");
    for (String item : new String[] {"ORD-tx-6-a", "ORD-tx-6-b"}) {
      assertThat(charges(item)).as("charges of %s", item).isZero();
      assertThat(dedupRows(item)).as("dedup rows of %s", item).isZero();
    }
  }

  /** One item's charge under its own key, inside the caller's transaction. */
  private static void deliverItem(String item, boolean failAfterCharge) {
    executor.execute(
        DedupKey.of("payment", item),
        () -> {
          try (Connection connection = transactions.getConnection();
              PreparedStatement charge =
                  connection.prepareStatement(
                      "INSERT INTO charges (order_no, amount) VALUES (?, 10.00)")) {
            charge.setString(1, item);
            charge.executeUpdate();
          }
          if (failAfterCharge) {
            throw new IllegalStateException("the item's bank answered 503 after its charge row");
          }
          return null;
        });
  }

  @Test
  void aKeyThatFailedInASeparateClaimKeepsNoErrorOnceATransactionalClaimSucceeds() {
    DedupKey key = DedupKey.of("payment", "ORD-tx-4");
    ClaimRequest request =
        new ClaimRequest(key, "consumer-a", Duration.ofMinutes(1), Duration.ofDays(1), null, null);
    JdbcDedupStore separate = JdbcDedupStore.builder(pool).build();
    ClaimResult.Claimed first = (ClaimResult.Claimed) separate.claim(request);
    assertThat(separate.fail(first, "bank timeout", Duration.ofDays(1))).isTrue();

    JdbcDedupStore transactional = JdbcDedupStore.builder(transactions).build();
    assertThat(transactions.inTransaction(() -> transactional.claimInTransaction(request)))
        .isInstanceOf(ClaimResult.Claimed.class);

    DedupRecord record = separate.find(key).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(record.attempts()).isEqualTo(2);
    assertThat(record.lastError()).isEmpty();
  }

  @Test
  void aTransactionalStoreOverThePoolItselfFailsClearlyAndAppliesNothing() throws SQLException {
    // The mistake to catch: the store given the pool, whose connections commit on their own.
    try (IdempotentExecutor overThePool =
        IdempotentExecutor.builder(JdbcDedupStore.builder(pool).build())
            .mode(DedupMode.TRANSACTIONAL)
            .build()) {
      assertThatThrownBy(() -> overThePool.execute(DedupKey.of("payment", "ORD-tx-3"), () -> "ran"))
          .isInstanceOf(DedupConfigurationException.class)
          .hasMessageContaining("DedupMode.TRANSACTIONAL needs an open transaction")
          .hasMessageContaining("payment/ORD-tx-3");
    }
    assertThat(dedupRows("ORD-tx-3")).isZero();
  }
}
