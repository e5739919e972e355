package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.testing.ConnectionSource;
import io.consumerdedup.testing.TestDatabase;
import io.consumerdedup.testing.TestMariaDb;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import javax.sql.DataSource;
import org.assertj.core.api.ThrowableAssert.ThrowingCallable;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * A {@code java.lang.Error} in the middle of a store call's own transaction (an OutOfMemoryError as
 * the driver reads an answer), on a pool that hands a connection on as it came back, as Tomcat
 * JDBC's pool does unless told to roll back on return: the transaction was left open on the pooled
 * connection, holding its row locks until some later call happened to commit it, and the connection
 * went back to the pool in another auto-commit mode than it was lent in.
 */
class ErrorInStoreCallTest {
  private static final Duration LEASE = Duration.ofMinutes(1);
  private static final Duration RETENTION = Duration.ofDays(1);

  private String schema;
  private String mariaDatabase;

  @BeforeEach
  void setUp() {
    schema = TestDatabase.newSchema("errorcall");
    mariaDatabase = TestMariaDb.newDatabase("errorcall");
  }

  @AfterEach
  void tearDown() {
    TestDatabase.dropSchema(schema);
    TestMariaDb.dropDatabase(mariaDatabase);
  }

  /** PostgreSQL: the Error as the answer of a group's lease renewals (one batch) is read. */
  @Test
  void anErrorInAGroupsRenewalOnPostgresRollsItBackBeforeTheConnectionGoesBackToThePool()
      throws Exception {
    try (Connection physical = TestDatabase.connect(schema);
        HikariDataSource others = TestDatabase.dataSource(schema, 2)) {
      AtomicBoolean inject = new AtomicBoolean();
      JdbcDedupStore holder =
          JdbcDedupStore.builder(pool(physical, "UPDATE", inject)).statementTimeout(LEASE).build();
      List<ClaimResult.Claimed> held =
          List.of(
              (ClaimResult.Claimed)
                  holder.claim(request(DedupKey.of("payment", "PAY-1"), "holder", "payments-0@1")),
              (ClaimResult.Claimed)
                  holder.claim(request(DedupKey.of("payment", "PAY-2"), "holder", "payments-0@2")));

      inject.set(true);
      Throwable thrown = catchThrowable(() -> holder.renewAll(held, LEASE));
      inject.set(false);

      assertLeftNothingBehind(
          thrown,
          physical,
          "the holder's SUCCESS of a key it renewed, on another of its connections",
          () -> assertThat(elsewhere(others).complete(held.get(0), RETENTION)).isTrue());
    }
  }

  /** MySQL/MariaDB: the Error as the answer of a claim's write, after its row lock was taken. */
  @Test
  void anErrorInAClaimOnMariaDbRollsItBackBeforeTheConnectionGoesBackToThePool() throws Exception {
    try (Connection physical = TestMariaDb.connect(mariaDatabase, TestMariaDb.Driver.MARIADB);
        HikariDataSource others =
            TestMariaDb.dataSource(mariaDatabase, TestMariaDb.Driver.MARIADB, 2)) {
      AtomicBoolean inject = new AtomicBoolean();
      JdbcDedupStore holder =
          JdbcDedupStore.builder(pool(physical, "INSERT", inject)).statementTimeout(LEASE).build();
      DedupKey key = DedupKey.of("payment", "PAY-3");

      inject.set(true);
      Throwable thrown = catchThrowable(() -> holder.claim(request(key, "holder", "payments-0@3")));
      inject.set(false);

      assertLeftNothingBehind(
          thrown,
          physical,
          "another consumer's claim of the key whose claim failed",
          () ->
              assertThat(elsewhere(others).claim(request(key, "other", "payments-0@9")))
                  .isInstanceOf(ClaimResult.Claimed.class));
    }
  }

  /**
   * What the failed call left: the caller saw the Error, the rows it wrote are reached at once on
   * another connection (not locked by a transaction nobody will end), and the pooled connection is
   * back in auto-commit mode, as it was lent.
   */
  private static void assertLeftNothingBehind(
      Throwable thrown, Connection physical, String reach, ThrowingCallable reachIt)
      throws SQLException {
    assertThat(thrown)
        .as("the injected Error reached the caller")
        .isInstanceOf(OutOfMemoryError.class);
    assertThat(catchThrowable(reachIt)).as(reach + " (an answer, not a lock wait)").isNull();
    assertThat(physical.getAutoCommit())
        .as("the pooled connection's auto-commit mode, as it was lent")
        .isTrue();
  }

  private static JdbcDedupStore elsewhere(DataSource others) {
    return JdbcDedupStore.builder(others).statementTimeout(Duration.ofSeconds(2)).build();
  }

  private static ClaimRequest request(DedupKey key, String owner, String source) {
    return new ClaimRequest(key, owner, LEASE, RETENTION, null, source);
  }

  /**
   * A pool of one connection that hands it on as it came back: no rollback, no reset. While {@code
   * inject} is set, the server runs each statement starting with {@code failing}, and reading its
   * answer throws an OutOfMemoryError.
   */
  private static ConnectionSource pool(Connection physical, String failing, AtomicBoolean inject) {
    return new ConnectionSource() {
      @Override
      public Connection getConnection() {
        return (Connection)
            Proxy.newProxyInstance(
                getClass().getClassLoader(),
                new Class<?>[] {Connection.class},
                (proxy, method, args) -> {
                  if (method.getName().equals("close")) {
                    return null;
                  }
                  Object result = invoke(physical, method, args);
                  if (method.getName().equals("prepareStatement")
                      && ((String) args[0]).startsWith(failing)) {
                    return failingAfterExecution((PreparedStatement) result, inject);
                  }
                  return result;
                });
      }
    };
  }

  private static PreparedStatement failingAfterExecution(
      PreparedStatement statement, AtomicBoolean inject) {
    return (PreparedStatement)
        Proxy.newProxyInstance(
            ErrorInStoreCallTest.class.getClassLoader(),
            new Class<?>[] {PreparedStatement.class},
            (proxy, method, args) -> {
              Object result = invoke(statement, method, args);
              if (method.getName().startsWith("execute") && inject.get()) {
                throw new OutOfMemoryError("Java heap space (injected as the answer is read)");
              }
              return result;
            });
  }

  private static Object invoke(Object target, java.lang.reflect.Method method, Object[] args)
      throws Throwable {
    try {
      return method.invoke(target, args);
    } catch (InvocationTargetException e) {
      throw e.getCause();
    }
  }
}
