package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.Disposition;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.testing.ConnectionSource;
import io.consumerdedup.testing.TestDatabase;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Building an executor in mode TRANSACTIONAL checks, on a connection of the store's own, that no
 * pooler would hand the handler's statements to another server connection. A DataSource that throws
 * a {@code RuntimeException} where JDBC says {@code SQLException} (Spring's routing DataSource
 * without a target for the thread, or a lazy connection over it; a pool behind an open circuit
 * breaker) threw it out of {@code build()} as it came, while mode SEPARATE builds and logs that the
 * table could not be checked: a plain consumer's program, and a Spring application (which builds
 * each listener's executor at start-up), did not start, where the README promises that a database
 * that does not answer at start-up is only logged. Each claim checks again.
 */
class TransactionalBuildDataSourceRuntimeExceptionTest {
  private static final String REASON = "Cannot determine target DataSource for lookup key [null]";

  private String schema;
  private HikariDataSource pool;
  private final AtomicBoolean failing = new AtomicBoolean();

  @BeforeEach
  void setUp() {
    schema = TestDatabase.newSchema("txbuild");
    pool = TestDatabase.dataSource(schema, 2);
  }

  @AfterEach
  void tearDown() {
    pool.close();
    TestDatabase.dropSchema(schema);
  }

  @Test
  void anExecutorBuiltWhileTheDataSourceHasNoTargetHoldsTheRecordAndAppliesItOnceItAnswers() {
    buildWhileFailingThenApplyOnce(
        new ConnectionSource() {
          @Override
          public Connection getConnection() throws SQLException {
            if (failing.get()) {
              throw new IllegalStateException(REASON);
            }
            return pool.getConnection();
          }
        },
        "TX-1");
  }

  @Test
  void anExecutorBuiltOnALazyConnectionWithoutATargetHoldsTheRecordAndAppliesItOnceItAnswers() {
    buildWhileFailingThenApplyOnce(
        new ConnectionSource() {
          @Override
          public Connection getConnection() throws SQLException {
            return failing.get() ? withoutTarget() : pool.getConnection();
          }
        },
        "TX-2");
  }

  private void buildWhileFailingThenApplyOnce(ConnectionSource dataSource, String orderNo) {
    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(dataSource);
    JdbcDedupStore store = JdbcDedupStore.builder(transactions).retryMaxAttempts(1).build();
    AtomicReference<IdempotentExecutor> built = new AtomicReference<>();
    AtomicInteger handlerRuns = new AtomicInteger();
    failing.set(true);

    Throwable thrown =
        catchThrowable(
            () ->
                built.set(IdempotentExecutor.builder(store).mode(DedupMode.TRANSACTIONAL).build()));

    assertThat(thrown).as("what building threw").isNull();
    try (IdempotentExecutor executor = built.get()) {
      DedupKey key = DedupKey.of("payment", orderNo);
      Throwable claimed =
          catchThrowable(
              () ->
                  transactions.inTransaction(
                      () -> executor.execute(key, handlerRuns::incrementAndGet)));
      assertThat(handlerRuns).as("handler runs while the DataSource has no target").hasValue(0);
      assertThat(Disposition.of(claimed))
          .as("what the adapters do with %s", claimed)
          .isEqualTo(Disposition.RETRY_LATER);

      failing.set(false);
      transactions.inTransaction(() -> executor.execute(key, handlerRuns::incrementAndGet));
      transactions.inTransaction(() -> executor.execute(key, handlerRuns::incrementAndGet));
      assertThat(handlerRuns).as("handler runs once the DataSource answers").hasValue(1);
    }
  }

  /**
   * What Spring's {@code LazyConnectionDataSourceProxy} lends when its routing target has no
   * DataSource for the thread: it answers the transaction's settings, commit and rollback itself,
   * and throws the routing's exception at every call that needs the target.
   */
  private static Connection withoutTarget() {
    boolean[] autoCommit = {true};
    return (Connection)
        Proxy.newProxyInstance(
            Connection.class.getClassLoader(),
            new Class<?>[] {Connection.class},
            (proxy, method, args) ->
                switch (method.getName()) {
                  case "getAutoCommit" -> autoCommit[0];
                  case "setAutoCommit" -> {
                    autoCommit[0] = (Boolean) args[0];
                    yield null;
                  }
                  case "commit", "rollback", "close" -> null;
                  case "isClosed" -> false;
                  case "equals" -> proxy == args[0];
                  case "hashCode" -> System.identityHashCode(proxy);
                  case "toString" -> "lazy connection without a target";
                  default -> throw new IllegalStateException(REASON);
                });
  }
}
