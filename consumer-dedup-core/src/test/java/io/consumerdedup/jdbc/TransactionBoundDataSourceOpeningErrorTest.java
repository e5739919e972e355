package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.testing.TestDatabase;
import io.consumerdedup.testing.ThrowingLog;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * An {@link Error} as {@link TransactionBoundDataSource} opens a transaction, after the pool lent
 * it a connection (a driver's {@code StackOverflowError} in {@code setAutoCommit(false)}): the
 * connection was never handed back, and a pool of two lent none after two of them.
 */
class TransactionBoundDataSourceOpeningErrorTest {
  private static String schema;
  private static HikariDataSource pool;

  @BeforeAll
  static void setUp() throws SQLException {
    schema = TestDatabase.newSchema("tx_opening");
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement()) {
      statement.execute("CREATE TABLE entries (name text NOT NULL)");
    }
    HikariConfig config = new HikariConfig();
    config.setJdbcUrl(TestDatabase.url(schema));
    config.setMaximumPoolSize(2);
    config.setConnectionTimeout(1_000);
    config.setPoolName("test-" + schema);
    pool = new HikariDataSource(config);
  }

  @AfterAll
  static void tearDown() {
    pool.close();
    TestDatabase.dropSchema(schema);
  }

  @Test
  void anErrorAsTheTransactionOpensHandsItsConnectionBackToThePool() throws Exception {
    AtomicInteger errorsLeft = new AtomicInteger(2);
    AtomicInteger thrown = new AtomicInteger();
    DataSource overflowing =
        (DataSource)
            Proxy.newProxyInstance(
                DataSource.class.getClassLoader(),
                new Class<?>[] {DataSource.class},
                (proxy, method, args) -> {
                  Object result = invoke(pool, method, args);
                  return method.getName().equals("getConnection")
                      ? overflowing((Connection) result, errorsLeft, thrown)
                      : result;
                });
    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(overflowing);

    for (int i = 0; i < 2; i++) {
      assertThatThrownBy(() -> transactions.inTransaction(() -> insert(transactions, "never")))
          .isInstanceOf(StackOverflowError.class);
    }
    assertThat(thrown).as("setAutoCommit(false) threw its Error").hasValue(2);

    transactions.inTransaction(() -> insert(transactions, "after"));
    assertThat(names()).contains("after");
    assertThat(pool.getHikariPoolMXBean().getActiveConnections())
        .as("connections not handed back to the pool")
        .isZero();
  }

  /**
   * After a real {@code StackOverflowError} or {@code OutOfMemoryError} the log lines of the
   * release throw as well: each line was written before the connection was aborted and closed, so
   * the connection stayed lent.
   */
  @Test
  void anErrorAsTheTransactionOpensHandsItsConnectionBackThoughItsLogLinesThrow() throws Exception {
    AtomicInteger errorsLeft = new AtomicInteger(2);
    AtomicInteger thrown = new AtomicInteger();
    DataSource overflowing =
        (DataSource)
            Proxy.newProxyInstance(
                DataSource.class.getClassLoader(),
                new Class<?>[] {DataSource.class},
                (proxy, method, args) -> {
                  Object result = invoke(pool, method, args);
                  return method.getName().equals("getConnection")
                      ? overflowing((Connection) result, errorsLeft, thrown)
                      : result;
                });
    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(overflowing);
    String logger = TransactionBoundDataSource.class.getName();
    List<Throwable> failures = new ArrayList<>();

    try (ThrowingLog aborting =
            ThrowingLog.on(logger, "Abort", () -> new OutOfMemoryError("Java heap space"));
        ThrowingLog resetting =
            ThrowingLog.on(logger, "Could not", () -> new OutOfMemoryError("Java heap space"))) {
      for (int i = 0; i < 2; i++) {
        try {
          transactions.inTransaction(() -> insert(transactions, "never"));
        } catch (Throwable e) {
          failures.add(e);
        }
      }
      assertThat(aborting.threw()).as("the abort's log line threw").isPositive();
    }
    assertThat(thrown).as("setAutoCommit(false) threw its Error").hasValue(2);
    assertThat(pool.getHikariPoolMXBean().getActiveConnections())
        .as("connections not handed back to the pool")
        .isZero();
    assertThat(failures)
        .as("what the caller was told")
        .hasSize(2)
        .allSatisfy(e -> assertThat(e).isInstanceOf(StackOverflowError.class));

    transactions.inTransaction(() -> insert(transactions, "after its lines threw"));
    assertThat(names()).contains("after its lines threw");
  }

  /** A connection whose {@code setAutoCommit(false)} throws while {@code errorsLeft} lasts. */
  private static Connection overflowing(
      Connection connection, AtomicInteger errorsLeft, AtomicInteger thrown) {
    return (Connection)
        Proxy.newProxyInstance(
            Connection.class.getClassLoader(),
            new Class<?>[] {Connection.class},
            (proxy, method, args) -> {
              if (method.getName().equals("setAutoCommit")
                  && Boolean.FALSE.equals(args[0])
                  && errorsLeft.getAndDecrement() > 0) {
                thrown.incrementAndGet();
                throw new StackOverflowError("in the driver's setAutoCommit");
              }
              return invoke(connection, method, args);
            });
  }

  private static Object invoke(Object target, Method method, Object[] args) throws Throwable {
    try {
      return method.invoke(target, args);
    } catch (InvocationTargetException e) {
      throw e.getCause();
    }
  }

  private static Void insert(DataSource dataSource, String name) throws SQLException {
    try (Connection connection = dataSource.getConnection();
        PreparedStatement insert =
            connection.prepareStatement("INSERT INTO entries (name) VALUES (?)")) {
      insert.setString(1, name);
      insert.executeUpdate();
    }
    return null;
  }

  private static List<String> names() throws SQLException {
    try (Connection connection = pool.getConnection();
        Statement statement = connection.createStatement();
        ResultSet rows = statement.executeQuery("SELECT name FROM entries")) {
      List<String> names = new ArrayList<>();
      while (rows.next()) {
        names.add(rows.getString(1));
      }
      return names;
    }
  }
}
