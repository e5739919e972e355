package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.BoundConnectionDataSource;
import io.consumerdedup.testing.TestDatabase;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * DedupMode.TRANSACTIONAL: the dedup row commits or rolls back with the handler's own writes, on a
 * plain JDBC transaction the caller opened.
 */
class TransactionalModeTest {
  private static String schema;
  private static final BoundConnectionDataSource bound = new BoundConnectionDataSource();
  private static IdempotentExecutor executor;

  @BeforeAll
  static void setUp() throws SQLException {
    schema = TestDatabase.newSchema("transactional");
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement()) {
      statement.execute("CREATE TABLE charges (order_no text NOT NULL, amount numeric NOT NULL)");
    }
    executor =
        IdempotentExecutor.builder(JdbcDedupStore.builder(bound).build())
            .mode(DedupMode.TRANSACTIONAL)
            .build();
  }

  @AfterAll
  static void tearDown() {
    executor.close();
    TestDatabase.dropSchema(schema);
  }

  /** Runs one delivery the way a transactional listener container does: begin, handle, commit. */
  private static <T> DedupResult<T> deliverInTransaction(
      String orderNo, Callable<T> handlerBeforeCharge, boolean failAfterCharge)
      throws SQLException {
    try (Connection connection = TestDatabase.connect(schema)) {
      connection.setAutoCommit(false);
      bound.bind(connection);
      try {
        DedupResult<T> result =
            executor.execute(
                DedupKey.of("payment", orderNo),
                () -> {
                  T value = handlerBeforeCharge.call();
                  try (PreparedStatement charge =
                      connection.prepareStatement(
                          "INSERT INTO charges (order_no, amount) VALUES (?, 10.00)")) {
                    charge.setString(1, orderNo);
                    charge.executeUpdate();
                  }
                  if (failAfterCharge) {
                    throw new IllegalStateException("bank answered 503 after the charge row");
                  }
                  return value;
                });
        connection.commit();
        return result;
      } catch (RuntimeException e) {
        connection.rollback();
        throw e;
      } finally {
        bound.unbind();
      }
    }
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
            () -> {
              try {
                return deliverInTransaction(
                    "ORD-tx-2",
                    () -> {
                      firstInHandler.countDown();
                      releaseFirst.await(30, TimeUnit.SECONDS);
                      return null;
                    },
                    false);
              } catch (SQLException e) {
                throw new IllegalStateException(e);
              }
            });
    assertThat(firstInHandler.await(10, TimeUnit.SECONDS)).isTrue();
    CompletableFuture<DedupResult<Object>> copy =
        CompletableFuture.supplyAsync(
            () -> {
              try {
                return deliverInTransaction("ORD-tx-2", () -> null, false);
              } catch (SQLException e) {
                throw new IllegalStateException(e);
              }
            });
    Thread.sleep(300);
    assertThat(copy).as("the copy waits on the uncommitted key").isNotDone();

    releaseFirst.countDown();

    assertThat(first.get(10, TimeUnit.SECONDS).outcome()).isEqualTo(Outcome.PROCESSED);
    assertThat(copy.get(10, TimeUnit.SECONDS).outcome()).isEqualTo(Outcome.DUPLICATE);
    assertThat(charges("ORD-tx-2")).isEqualTo(1);
  }

  @Test
  void withoutAnOpenTransactionItFailsClearlyAndAppliesNothing() throws SQLException {
    try (Connection connection = TestDatabase.connect(schema)) {
      bound.bind(connection); // auto-commit: no transaction
      try {
        assertThatThrownBy(() -> executor.execute(DedupKey.of("payment", "ORD-tx-3"), () -> "ran"))
            .isInstanceOf(IllegalStateException.class)
            .hasMessageContaining("DedupMode.TRANSACTIONAL needs an open transaction")
            .hasMessageContaining("payment/ORD-tx-3");
      } finally {
        bound.unbind();
      }
    }
    assertThat(dedupRows("ORD-tx-3")).isZero();
  }
}
