package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupStoreDataException;
import io.consumerdedup.core.DedupStoreUnavailableException;
import io.consumerdedup.core.Disposition;
import io.consumerdedup.testing.FaultyDataSource;
import io.consumerdedup.testing.TestDatabase;
import java.io.IOException;
import java.sql.CallableStatement;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import javax.sql.DataSource;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.postgresql.PGConnection;

/**
 * {@link TransactionBoundDataSource} against a real PostgreSQL, on a pool of one connection with a
 * short wait: a connection it failed to hand back would make the next transaction fail at once.
 */
class TransactionBoundDataSourceTest {
  private static String schema;
  private static HikariDataSource pool;
  private static TransactionBoundDataSource transactions;

  @BeforeAll
  static void setUp() throws SQLException {
    schema = TestDatabase.newSchema("tx_bound");
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement()) {
      statement.execute("CREATE TABLE entries (name text NOT NULL)");
      // Fails the commit of a transaction that inserted such a name, as a deferred constraint does.
      statement.execute(
          """
          CREATE FUNCTION refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN
            IF NEW.name LIKE 'serialization-failure%' THEN
              RAISE EXCEPTION 'could not serialize access' USING ERRCODE = '40001';
            ELSIF NEW.name LIKE 'refused-data%' THEN
              RAISE EXCEPTION 'deferred check failed' USING ERRCODE = '23514';
            END IF;
            RETURN NULL;
          END $$""");
      statement.execute(
          "CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER INSERT ON entries"
              + " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_at_commit()");
    }
    // One connection, and a short wait for it, set before the pool starts: a started pool may keep
    // the 30 s default, and a test of "no connection left" would then wait for the other thread.
    HikariConfig config = new HikariConfig();
    config.setJdbcUrl(TestDatabase.url(schema));
    config.setMaximumPoolSize(1);
    config.setConnectionTimeout(1_000);
    config.setPoolName("test-" + schema);
    pool = new HikariDataSource(config);
    transactions = TransactionBoundDataSource.of(pool);
  }

  @AfterAll
  static void tearDown() {
    pool.close();
    TestDatabase.dropSchema(schema);
  }

  @BeforeEach
  void empty() throws SQLException {
    try (Connection connection = pool.getConnection();
        Statement statement = connection.createStatement()) {
      statement.execute("DELETE FROM entries");
    }
  }

  private static void insert(DataSource dataSource, String name) throws SQLException {
    try (Connection connection = dataSource.getConnection();
        PreparedStatement insert =
            connection.prepareStatement("INSERT INTO entries (name) VALUES (?)")) {
      insert.setString(1, name);
      insert.executeUpdate();
    }
  }

  /** The names committed, read on a connection of its own. */
  private static List<String> committed() throws SQLException {
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement();
        ResultSet rows = statement.executeQuery("SELECT name FROM entries ORDER BY name")) {
      List<String> names = new java.util.ArrayList<>();
      while (rows.next()) {
        names.add(rows.getString(1));
      }
      return names;
    }
  }

  /** The pool's one connection came back, in auto-commit mode, and works. */
  private static void assertThePoolsConnectionCameBackClean() throws SQLException {
    try (Connection connection = pool.getConnection()) {
      assertThat(connection.getAutoCommit()).as("auto-commit, as the pool lent it").isTrue();
    }
    transactions.inTransaction(
        () -> {
          insert(transactions, "after");
          return null;
        });
    assertThat(committed()).contains("after");
  }

  @Test
  void workThatReturnsIsCommittedTogetherAndItsResultReturned() throws SQLException {
    String result =
        transactions.inTransaction(
            () -> {
              insert(transactions, "claim");
              insert(transactions, "charge");
              assertThat(committed()).as("nothing visible before the commit").isEmpty();
              return "done";
            });

    assertThat(result).isEqualTo("done");
    assertThat(committed()).containsExactly("charge", "claim");
    assertThePoolsConnectionCameBackClean();
  }

  @Test
  void workThatThrowsIsRolledBackAndItsOwnExceptionRethrown() throws SQLException {
    for (Throwable thrown :
        List.of(
            new IllegalStateException("bank answered 503"),
            new IOException("bank unreachable"),
            new AssertionError("a bug"))) {
      assertThatThrownBy(
              () ->
                  transactions.inTransaction(
                      () -> {
                        insert(transactions, "charge");
                        throwUnchecked(thrown);
                        return null;
                      }))
          .isSameAs(thrown);
    }

    assertThat(committed()).isEmpty();
    assertThePoolsConnectionCameBackClean();
  }

  /** Throws a checked exception unchanged, as work declared to throw it would. */
  @SuppressWarnings("unchecked")
  private static <X extends Throwable> void throwUnchecked(Throwable thrown) throws X {
    throw (X) thrown;
  }

  @Test
  void aCheckedExceptionOfTheWorkReachesTheCallerAsItsOwnType() {
    IOException thrown = new IOException("bank unreachable");
    try {
      transactions.inTransaction(
          () -> {
            throw thrown;
          });
    } catch (IOException e) {
      assertThat(e).isSameAs(thrown);
      return;
    }
    throw new AssertionError("The IOException did not reach the caller");
  }

  @Test
  void aNestedTransactionIsRefusedAndTheOuterOneRollsBack() throws SQLException {
    assertThatThrownBy(
            () ->
                transactions.inTransaction(
                    () -> {
                      insert(transactions, "outer");
                      return transactions.inTransaction(() -> "inner");
                    }))
        .isInstanceOf(DedupConfigurationException.class)
        .hasMessageContaining("already open on this thread")
        .hasMessageContaining("would commit the inner work apart from the outer");

    assertThat(committed()).isEmpty();
    assertThePoolsConnectionCameBackClean();
  }

  @Test
  void outsideATransactionItHandsOutNoConnection() {
    assertThatThrownBy(transactions::getConnection)
        .isInstanceOf(SQLException.class)
        .hasMessageContaining("No transaction of this TransactionBoundDataSource is open");
  }

  @Test
  void theWorkCannotEndTheTransactionNorKeepItsConnection() throws SQLException {
    AtomicReference<Connection> kept = new AtomicReference<>();
    transactions.inTransaction(
        () -> {
          Connection connection = transactions.getConnection();
          insert(transactions, "charge");
          for (ConnectionCall ending :
              List.<ConnectionCall>of(
                  connection::commit,
                  connection::rollback,
                  () -> connection.setAutoCommit(true),
                  () -> connection.abort(Runnable::run))) {
            assertThatThrownBy(ending::run)
                .isInstanceOf(SQLException.class)
                .hasMessageContaining("is refused");
          }
          connection.close();
          assertThat(connection.isClosed()).isTrue();
          // Closing one handle leaves the transaction open for the next.
          insert(transactions, "claim");
          assertThat(committed()).isEmpty();
          kept.set(transactions.getConnection());
          return null;
        });

    assertThat(committed()).containsExactly("charge", "claim");
    assertThat(kept.get().isClosed()).isTrue();
    assertThatThrownBy(() -> kept.get().prepareStatement("DELETE FROM entries"))
        .isInstanceOf(SQLException.class)
        .hasMessageContaining("has ended");
    assertThat(committed()).containsExactly("charge", "claim");
  }

  @Test
  void theConnectionReachedThroughItsStatementsMetaDataOrUnwrapCannotEndTheTransaction()
      throws SQLException {
    IllegalStateException thrown = new IllegalStateException("bank answered 503");
    List<String> committedHalfWay = new java.util.ArrayList<>();
    assertThatThrownBy(
            () ->
                transactions.inTransaction(
                    () -> {
                      insert(transactions, "charge");
                      Connection connection = transactions.getConnection();
                      try (Statement statement = connection.createStatement();
                          PreparedStatement prepared = connection.prepareStatement("SELECT 1");
                          CallableStatement callable = connection.prepareCall("{call now()}");
                          ResultSet rows = prepared.executeQuery()) {
                        Map<String, Connection> reached = new java.util.LinkedHashMap<>();
                        reached.put("Statement.getConnection()", statement.getConnection());
                        reached.put("PreparedStatement.getConnection()", prepared.getConnection());
                        reached.put("CallableStatement.getConnection()", callable.getConnection());
                        reached.put(
                            "ResultSet.getStatement().getConnection()",
                            rows.getStatement().getConnection());
                        reached.put(
                            "DatabaseMetaData.getConnection()",
                            connection.getMetaData().getConnection());
                        reached.put(
                            "unwrap(Connection.class)", connection.unwrap(Connection.class));
                        for (Map.Entry<String, Connection> entry : reached.entrySet()) {
                          try {
                            entry.getValue().commit();
                            committedHalfWay.add(entry.getKey());
                          } catch (SQLException refused) {
                            assertThat(refused.getMessage()).contains("is refused");
                          }
                        }
                      }
                      throw thrown;
                    }))
        .isSameAs(thrown);

    assertThat(committedHalfWay)
        .as("connections that committed the transaction half-way")
        .isEmpty();
    assertThat(committed()).as("nothing committed, the work threw").isEmpty();
    assertThePoolsConnectionCameBackClean();
  }

  @Test
  void aVendorInterfaceIsStillReachableButNotTheConnectionBehindIt() throws SQLException {
    transactions.inTransaction(
        () -> {
          Connection connection = transactions.getConnection();
          PGConnection postgres = connection.unwrap(PGConnection.class);
          assertThat(postgres.getBackendPID()).isPositive();
          assertThat(postgres).isNotInstanceOf(Connection.class);
          assertThatThrownBy(() -> connection.unwrap(org.postgresql.jdbc.PgConnection.class))
              .isInstanceOf(SQLException.class)
              .hasMessageContaining("is refused");
          return null;
        });
  }

  /** A call on the transaction's connection, for the refused ones. */
  @FunctionalInterface
  private interface ConnectionCall {
    void run() throws SQLException;
  }

  @Test
  void aCommitThatFailsIsReportedByKindAndLeavesNothing() throws SQLException {
    assertThatThrownBy(
            () -> transactions.inTransaction(() -> insertReturning("serialization-failure")))
        .isInstanceOf(DedupStoreUnavailableException.class)
        .hasMessageContaining("Committing the transaction")
        .hasMessageContaining("40001")
        .satisfies(e -> assertThat(Disposition.of(e)).isEqualTo(Disposition.RETRY_LATER));
    assertThatThrownBy(() -> transactions.inTransaction(() -> insertReturning("refused-data")))
        .isInstanceOf(DedupStoreDataException.class)
        .hasMessageContaining("23514")
        .satisfies(e -> assertThat(Disposition.of(e)).isEqualTo(Disposition.DEAD_LETTER));

    assertThat(committed()).as("a commit that failed leaves no row").isEmpty();
    assertThePoolsConnectionCameBackClean();
  }

  private static String insertReturning(String name) throws SQLException {
    insert(transactions, name);
    return name;
  }

  @Test
  void aRollbackThatFailsKeepsTheWorksExceptionAndCommitsNothing() throws Exception {
    try (FaultyDataSource faulty = FaultyDataSource.on(schema, 1, Duration.ofSeconds(2))) {
      TransactionBoundDataSource overFaulty = TransactionBoundDataSource.of(faulty);
      IllegalStateException thrown = new IllegalStateException("bank answered 503");

      assertThatThrownBy(
              () ->
                  overFaulty.inTransaction(
                      () -> {
                        insert(overFaulty, "charge");
                        faulty.proxy().cutAll(); // the network goes before the rollback
                        throw thrown;
                      }))
          .isSameAs(thrown)
          .satisfies(
              e -> assertThat(e.getSuppressed()).singleElement().isInstanceOf(SQLException.class));
      assertThat(faulty.proxy().connectionsReset()).isPositive();

      assertThat(committed()).isEmpty();
      // The broken connection was not handed out again: the next transaction works.
      overFaulty.inTransaction(
          () -> {
            insert(overFaulty, "retry");
            return null;
          });
      assertThat(committed()).containsExactly("retry");
    }
  }

  /**
   * The rollback after the work's failure throws an {@code Error} (a driver's StackOverflowError,
   * an OutOfMemoryError as it reads the server's answer): it replaced the work's own exception, so
   * the caller saw the rollback's Error and not why the work failed (a record's failure counted, or
   * dead-lettered, as whatever the Error was).
   */
  @Test
  void aRollbackThatThrowsAnErrorKeepsTheWorksExceptionAndCommitsNothing() throws Exception {
    AtomicBoolean rollbackThrew = new AtomicBoolean();
    DataSource rollbackFails =
        (DataSource)
            java.lang.reflect.Proxy.newProxyInstance(
                DataSource.class.getClassLoader(),
                new Class<?>[] {DataSource.class},
                (proxy, method, args) -> {
                  Object answer = invoke(pool, method, args);
                  if (!method.getName().equals("getConnection")) {
                    return answer;
                  }
                  Connection connection = (Connection) answer;
                  return java.lang.reflect.Proxy.newProxyInstance(
                      Connection.class.getClassLoader(),
                      new Class<?>[] {Connection.class},
                      (c, call, callArgs) -> {
                        if (call.getName().equals("rollback") && callArgs == null) {
                          rollbackThrew.set(true);
                          throw new OutOfMemoryError(
                              "Java heap space, reading the rollback's reply");
                        }
                        return invoke(connection, call, callArgs);
                      });
                });
    TransactionBoundDataSource overFailing = TransactionBoundDataSource.of(rollbackFails);
    IllegalStateException thrown = new IllegalStateException("bank answered 503");

    assertThatThrownBy(
            () ->
                overFailing.inTransaction(
                    () -> {
                      insert(overFailing, "charge");
                      throw thrown;
                    }))
        .as("what the caller of the failed work is told")
        .isSameAs(thrown)
        .satisfies(
            e ->
                assertThat(e.getSuppressed()).singleElement().isInstanceOf(OutOfMemoryError.class));
    assertThat(rollbackThrew).as("the rollback threw").isTrue();
    assertThat(committed()).isEmpty();
    assertThePoolsConnectionCameBackClean();
  }

  private static Object invoke(Object target, java.lang.reflect.Method method, Object[] args)
      throws Throwable {
    try {
      return method.invoke(target, args);
    } catch (java.lang.reflect.InvocationTargetException e) {
      throw e.getCause();
    }
  }

  @Test
  void anInterruptedThreadStillCommitsOrRollsBackAndKeepsItsInterrupt() throws SQLException {
    try {
      transactions.inTransaction(
          () -> {
            insert(transactions, "charge");
            Thread.currentThread().interrupt(); // shutdownNow() while the work ran
            return null;
          });
      assertThat(Thread.currentThread().isInterrupted()).isTrue();
      assertThatThrownBy(
              () ->
                  transactions.inTransaction(
                      () -> {
                        insert(transactions, "second charge");
                        throw new IllegalStateException("stopped by the interrupt");
                      }))
          .hasMessage("stopped by the interrupt");
      assertThat(Thread.currentThread().isInterrupted()).isTrue();
    } finally {
      Thread.interrupted();
    }

    assertThat(committed()).containsExactly("charge");
    assertThePoolsConnectionCameBackClean();
  }

  @Test
  void eachThreadHasItsOwnTransactionAndNoConnectionLeftMeansRetryLater() throws Exception {
    CountDownLatch holding = new CountDownLatch(1);
    CountDownLatch release = new CountDownLatch(1);
    CompletableFuture<Void> other =
        CompletableFuture.runAsync(
            () -> {
              try {
                transactions.inTransaction(
                    () -> {
                      insert(transactions, "other thread");
                      holding.countDown();
                      return release.await(10, TimeUnit.SECONDS);
                    });
              } catch (Exception e) {
                throw new IllegalStateException(e);
              }
            });
    assertThat(holding.await(10, TimeUnit.SECONDS)).isTrue();

    // The pool's one connection is the other thread's transaction's.
    AtomicBoolean ran = new AtomicBoolean();
    assertThatThrownBy(
            () ->
                transactions.inTransaction(
                    () -> {
                      ran.set(true);
                      return null;
                    }))
        .isInstanceOf(DedupStoreUnavailableException.class)
        .hasMessageContaining("no connection from the pool");
    assertThat(ran).as("the work did not run").isFalse();
    assertThatThrownBy(transactions::getConnection)
        .as("this thread is not in the other thread's transaction")
        .isInstanceOf(SQLException.class);

    release.countDown();
    other.get(10, TimeUnit.SECONDS);
    assertThat(committed()).containsExactly("other thread");
    assertThePoolsConnectionCameBackClean();
  }

  @Test
  void itRefusesToWrapItself() {
    assertThatThrownBy(() -> TransactionBoundDataSource.of(transactions))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("already a TransactionBoundDataSource");
  }
}
