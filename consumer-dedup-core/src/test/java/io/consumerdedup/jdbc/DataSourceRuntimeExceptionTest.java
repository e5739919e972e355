package io.consumerdedup.jdbc;

import static io.consumerdedup.testing.RoutingWithoutTarget.REASON;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.DedupStoreUnavailableException;
import io.consumerdedup.core.Disposition;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.testing.ConnectionSource;
import io.consumerdedup.testing.RoutingWithoutTarget;
import io.consumerdedup.testing.TestDatabase;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * A DataSource that throws a {@code RuntimeException} where JDBC says {@code SQLException}:
 * Spring's {@code AbstractRoutingDataSource} on a thread that carries no lookup key, a pool wrapped
 * in a circuit breaker that is open. Passed on as it came, the exception was taken for the
 * handler's own failure ({@link Disposition#HANDLER_FAILED}): the adapters counted attempts of a
 * handler that never ran and dead-lettered the record, and the admin operations threw it at the
 * operator without saying that the table did not answer.
 */
class DataSourceRuntimeExceptionTest {
  private String schema;
  private HikariDataSource pool;
  private final AtomicBoolean failing = new AtomicBoolean();
  private ConnectionSource routing;
  private JdbcDedupStore store;

  @BeforeEach
  void setUp() {
    schema = TestDatabase.newSchema("dsruntime");
    pool = TestDatabase.dataSource(schema, 2);
    routing = RoutingWithoutTarget.routing(pool, failing::get);
    store = JdbcDedupStore.builder(routing).retryMaxAttempts(1).build();
  }

  @AfterEach
  void tearDown() {
    pool.close();
    TestDatabase.dropSchema(schema);
  }

  @Test
  void aClaimIsRetriedLaterNotCountedAsTheHandlersFailure() {
    AtomicInteger handlerRuns = new AtomicInteger();
    try (IdempotentExecutor executor = IdempotentExecutor.builder(store).build()) {
      failing.set(true);
      Throwable thrown =
          catchThrowable(
              () -> executor.execute(DedupKey.of("payment", "DS-1"), handlerRuns::incrementAndGet));

      assertThat(handlerRuns).as("handler runs").hasValue(0);
      assertThat(Disposition.of(thrown))
          .as("what the adapters do with %s", thrown)
          .isEqualTo(Disposition.RETRY_LATER);
      assertThat(thrown)
          .isInstanceOf(DedupStoreUnavailableException.class)
          .hasMessageContaining("IllegalStateException")
          .hasMessageContaining(REASON)
          .hasCauseInstanceOf(IllegalStateException.class);

      failing.set(false);
      assertThat(executor.execute(DedupKey.of("payment", "DS-1"), handlerRuns::incrementAndGet))
          .as("the next delivery once the DataSource answers")
          .satisfies(result -> assertThat(handlerRuns).hasValue(1));
    }
  }

  /**
   * Spring's {@code LazyConnectionDataSourceProxy} over a routing DataSource lends a connection at
   * once and asks the target for one at its first call that needs it: the routing's exception then
   * comes from the connection, not from {@code getConnection()}.
   */
  @Test
  void aClaimWhoseLazyConnectionFindsNoTargetIsRetriedLaterNotCountedAsTheHandlersFailure() {
    ConnectionSource lazy = throwingWhileFailing();
    JdbcDedupStore lazyStore = JdbcDedupStore.builder(lazy).retryMaxAttempts(1).build();
    AtomicInteger handlerRuns = new AtomicInteger();
    try (IdempotentExecutor executor = IdempotentExecutor.builder(lazyStore).build()) {
      failing.set(true);
      Throwable thrown =
          catchThrowable(
              () -> executor.execute(DedupKey.of("payment", "DS-2"), handlerRuns::incrementAndGet));

      assertThat(handlerRuns).as("handler runs").hasValue(0);
      assertThat(Disposition.of(thrown))
          .as("what the adapters do with %s", thrown)
          .isEqualTo(Disposition.RETRY_LATER);
      assertThat(thrown)
          .isInstanceOf(DedupStoreUnavailableException.class)
          .hasMessageContaining(REASON)
          .hasCauseInstanceOf(IllegalStateException.class);

      failing.set(false);
      executor.execute(DedupKey.of("payment", "DS-2"), handlerRuns::incrementAndGet);
      assertThat(handlerRuns).as("handler runs once the DataSource answers").hasValue(1);
    }
  }

  /**
   * Mode TRANSACTIONAL over a lazy connection: the transaction opens on it without a target ({@code
   * setAutoCommit(false)} is answered by the proxy itself), and the routing's exception comes from
   * the claim's first statement, inside the caller's transaction.
   */
  @Test
  void aClaimInTheCallersTransactionWhoseLazyConnectionFindsNoTargetIsRetriedLater() {
    ConnectionSource lazy = RoutingWithoutTarget.lazy(pool, failing::get);
    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(lazy);
    JdbcDedupStore lazyStore = JdbcDedupStore.builder(transactions).retryMaxAttempts(1).build();
    AtomicInteger handlerRuns = new AtomicInteger();
    try (IdempotentExecutor executor =
        IdempotentExecutor.builder(lazyStore).mode(DedupMode.TRANSACTIONAL).build()) {
      failing.set(true);
      Throwable thrown =
          catchThrowable(
              () ->
                  transactions.inTransaction(
                      () ->
                          executor.execute(
                              DedupKey.of("payment", "DS-3"), handlerRuns::incrementAndGet)));

      assertThat(handlerRuns).as("handler runs").hasValue(0);
      assertThat(Disposition.of(thrown))
          .as("what the adapters do with %s", thrown)
          .isEqualTo(Disposition.RETRY_LATER);
      assertThat(thrown)
          .isInstanceOf(DedupStoreUnavailableException.class)
          .hasMessageContaining(REASON)
          .hasCauseInstanceOf(IllegalStateException.class);

      failing.set(false);
      transactions.inTransaction(
          () -> executor.execute(DedupKey.of("payment", "DS-3"), handlerRuns::incrementAndGet));
      assertThat(handlerRuns).as("handler runs once the DataSource answers").hasValue(1);
    }
  }

  /**
   * A connection that throws a {@code RuntimeException} at the transaction's first call (a lazy
   * connection that does not answer the auto-commit setting itself, a wrapper with an open circuit
   * breaker) goes back to the pool, and the record waits for the table.
   */
  @Test
  void aTransactionWhoseConnectionThrowsAtItsOpeningIsRetriedLaterAndGivesTheConnectionBack() {
    ConnectionSource throwing = throwingWhileFailing();
    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(throwing);
    AtomicInteger workRuns = new AtomicInteger();
    failing.set(true);

    Throwable thrown = catchThrowable(() -> transactions.inTransaction(workRuns::incrementAndGet));

    assertThat(workRuns).as("work runs").hasValue(0);
    assertThat(Disposition.of(thrown))
        .as("what the adapters do with %s", thrown)
        .isEqualTo(Disposition.RETRY_LATER);
    assertThat(pool.getHikariPoolMXBean().getActiveConnections())
        .as("connections not given back to the pool")
        .isZero();

    failing.set(false);
    assertThat(transactions.inTransaction(workRuns::incrementAndGet))
        .as("the next try once the connection answers")
        .isEqualTo(1);
  }

  /**
   * Pool connections that throw the routing's exception at every call but {@code close} while
   * {@link #failing} is set: a lazy connection whose target cannot be found, a wrapper with an open
   * circuit breaker.
   */
  private ConnectionSource throwingWhileFailing() {
    return new ConnectionSource() {
      @Override
      public Connection getConnection() throws SQLException {
        Connection target = pool.getConnection();
        return (Connection)
            Proxy.newProxyInstance(
                Connection.class.getClassLoader(),
                new Class<?>[] {Connection.class},
                (proxy, method, args) -> {
                  if (failing.get() && !method.getName().equals("close")) {
                    throw new IllegalStateException(REASON);
                  }
                  try {
                    return method.invoke(target, args);
                  } catch (InvocationTargetException e) {
                    throw e.getCause();
                  }
                });
      }
    };
  }

  @Test
  void aTransactionOfTheTransactionalModeIsRetriedLaterNotCountedAsTheWorksFailure() {
    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(routing);
    AtomicInteger workRuns = new AtomicInteger();
    failing.set(true);

    Throwable thrown = catchThrowable(() -> transactions.inTransaction(workRuns::incrementAndGet));

    assertThat(workRuns).as("work runs").hasValue(0);
    assertThat(Disposition.of(thrown))
        .as("what the adapters do with %s", thrown)
        .isEqualTo(Disposition.RETRY_LATER);
    assertThat(thrown)
        .isInstanceOf(DedupStoreUnavailableException.class)
        .hasMessageContaining("no connection")
        .hasMessageContaining(REASON);

    failing.set(false);
    assertThat(transactions.inTransaction(workRuns::incrementAndGet))
        .as("the next try once the DataSource answers")
        .isEqualTo(1);
  }

  @Test
  void anAdminReadSaysTheTableDidNotAnswer() {
    JdbcDedupAdmin admin = JdbcDedupAdmin.of(store);
    failing.set(true);

    Throwable thrown = catchThrowable(admin::counts);

    assertThat(thrown)
        .isInstanceOf(DedupStoreUnavailableException.class)
        .hasMessageContaining("admin counts")
        .hasMessageContaining(REASON);
  }
}
