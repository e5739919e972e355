package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStoreUnavailableException;
import io.consumerdedup.testing.ConnectionSource;
import io.consumerdedup.testing.TestDatabase;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.IntStream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.postgresql.PGStatement;
import org.slf4j.LoggerFactory;

/**
 * What a pooler in transaction mode does to named server-side statements, done to the store's own
 * server session: the statement it prepared is gone (26000), its name is taken (42P05), or another
 * statement holds its name (08P01 on the parameter count, 22P02 on a parameter's type). Each is a
 * statement error, not a fact about the data: the call is tried again and succeeds, so no valid
 * record is dead-lettered or held for it.
 */
class ServerStatementErrorTest {
  private static final Duration LEASE = Duration.ofMinutes(1);

  /** The server-side change under the store's connection, and the SQL state it causes. */
  enum Fault {
    STATEMENT_GONE("26000"),
    NAME_TAKEN("42P05"),
    NAME_HOLDS_STATEMENT_WITHOUT_PARAMETERS("08P01"),
    NAME_HOLDS_STATEMENT_OF_OTHER_TYPES("22P02");

    final String sqlState;

    Fault(String sqlState) {
      this.sqlState = sqlState;
    }
  }

  private String schema;
  private HikariDataSource pool;

  @BeforeEach
  void setUp() {
    schema = TestDatabase.newSchema("statements");
    HikariConfig config = new HikariConfig();
    // One connection, whose statements are named from their first execution.
    config.setJdbcUrl(TestDatabase.url(schema) + "&prepareThreshold=1");
    config.setMaximumPoolSize(1);
    pool = new HikariDataSource(config);
  }

  @AfterEach
  void tearDown() {
    pool.close();
    TestDatabase.dropSchema(schema);
  }

  /**
   * In auto-commit mode pgjdbc prepares a statement that is gone once more by itself, so only the
   * caller's transaction meets 26000 (see the test below).
   */
  @ParameterizedTest
  @EnumSource(value = Fault.class, names = "STATEMENT_GONE", mode = EnumSource.Mode.EXCLUDE)
  void aStatementErrorOfTheServerSessionIsTriedAgainAndTheClaimSucceeds(Fault fault)
      throws SQLException {
    FaultySession dataSource = new FaultySession(pool, fault);
    JdbcDedupStore store =
        JdbcDedupStore.builder(dataSource).retryInitialBackoff(Duration.ofMillis(10)).build();
    List<String> sqlStates = new ArrayList<>();
    store
        .retry()
        .getEventPublisher()
        .onRetry(
            event ->
                sqlStates.add(((SQLException) event.getLastThrowable().getCause()).getSQLState()));
    ListAppender<ILoggingEvent> logged = new ListAppender<>();
    logged.start();
    Logger logger = (Logger) LoggerFactory.getLogger(JdbcDedupStore.class);
    logger.addAppender(logged);
    if (fault != Fault.NAME_TAKEN) {
      // The claim statement (one key, and a batch) is now a named statement of the session.
      store.claim(request("warm-up"));
      store.claimAll(List.of(request("warm-up-1"), request("warm-up-2")));
    }

    dataSource.armed = true;
    List<ClaimResult> results;
    try {
      results = store.claimAll(IntStream.range(0, 8).mapToObj(i -> request("order-" + i)).toList());
    } finally {
      logger.detachAppender(logged);
    }
    // A refused statement's data is tried once more on a fresh statement, and says so.
    logged.list.stream()
        .map(ILoggingEvent::getFormattedMessage)
        .filter(message -> message.contains("trying once more on a fresh statement"))
        .map(message -> message.replaceAll("(?s).*\\(SQL state (\\w+)\\).*", "$1"))
        .forEach(sqlStates::add);

    assertThat(dataSource.injected).as("faults injected into the session").isEqualTo(1);
    assertThat(results)
        .allSatisfy(result -> assertThat(result).isInstanceOf(ClaimResult.Claimed.class));
    assertThat(sqlStates).as("SQL states the store met").containsExactly(fault.sqlState);
  }

  @Test
  void aStatementGoneUnderTheCallersTransactionHoldsTheRecord() {
    FaultySession dataSource = new FaultySession(pool, Fault.STATEMENT_GONE);
    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(dataSource);
    JdbcDedupStore store = JdbcDedupStore.builder(transactions).build();
    transactions.inTransaction(() -> store.claimInTransaction(request("warm-up")));

    dataSource.armed = true;
    assertThatThrownBy(
            () -> transactions.inTransaction(() -> store.claimInTransaction(request("order-1"))))
        .as("held and tried again later, never dead-lettered")
        .isInstanceOf(DedupStoreUnavailableException.class)
        .hasMessageContaining("SQL state 26000");
    assertThat(dataSource.injected).isEqualTo(1);

    ClaimResult again =
        transactions.inTransaction(() -> store.claimInTransaction(request("order-1")));
    assertThat(again).isInstanceOf(ClaimResult.Claimed.class);
  }

  private static ClaimRequest request(String orderNo) {
    return new ClaimRequest(
        DedupKey.of("payment", orderNo), "consumer", LEASE, Duration.ofDays(1), null, null);
  }

  /**
   * Hands out the pool's connection; once armed, changes its server session's named statements as a
   * pooler would before the next statement runs, and records the SQL states statements meet.
   */
  private static final class FaultySession extends ConnectionSource {
    private final HikariDataSource pool;
    private final Fault fault;
    volatile boolean armed;
    int injected;

    FaultySession(HikariDataSource pool, Fault fault) {
      this.pool = pool;
      this.fault = fault;
    }

    @Override
    public Connection getConnection() throws SQLException {
      Connection connection = pool.getConnection();
      if (armed && injected == 0) {
        injected++;
        try {
          inject(connection);
        } catch (SQLException | RuntimeException e) {
          connection.close();
          throw new IllegalStateException("Could not inject " + fault, e);
        }
      }
      return connection;
    }

    /** A statement of the injection itself, which must not take a name of the session. */
    private static Statement unnamed(Connection connection) throws SQLException {
      Statement statement = connection.createStatement();
      statement.unwrap(PGStatement.class).setPrepareThreshold(0);
      return statement;
    }

    private void inject(Connection connection) throws SQLException {
      // The store's statements only, which pgjdbc's statement cache holds on to. Another one, such
      // as the pool's SHOW TRANSACTION ISOLATION LEVEL, pgjdbc closes once the garbage collector
      // takes its query, before its next query: a DEALLOCATE of it then fails with 26000, on which
      // pgjdbc prepares every statement again under new names, and no fault reaches the store.
      List<String> names = new ArrayList<>();
      try (Statement statement = unnamed(connection);
          ResultSet rows =
              statement.executeQuery(
                  "SELECT name FROM pg_prepared_statements WHERE statement LIKE '%biz_key%'")) {
        while (rows.next()) {
          names.add(rows.getString(1));
        }
      }
      try (Statement statement = unnamed(connection)) {
        switch (fault) {
          case STATEMENT_GONE -> {
            for (String name : names) {
              statement.execute("DEALLOCATE \"" + name + "\"");
            }
          }
          case NAME_TAKEN -> {
            // The name pgjdbc gives the session's next statement, as another client's statement of
            // that name on a shared server connection; a pooler's next transaction would land
            // elsewhere, here the next name is free. pgjdbc's counter counts on from every name it
            // gave, some of them deallocated since (the pool's first query, SHOW TRANSACTION
            // ISOLATION LEVEL, once its statement is closed): so a probe takes a name now, and the
            // next one is taken.
            int next;
            try (PreparedStatement probe = connection.prepareStatement("SELECT 'name probe'")) {
              probe.executeQuery().close();
              try (ResultSet row =
                  statement.executeQuery(
                      "SELECT name FROM pg_prepared_statements"
                          + " WHERE statement = 'SELECT ''name probe'''")) {
                if (!row.next()) {
                  throw new IllegalStateException("The probe statement was not named");
                }
                next = Integer.parseInt(row.getString(1).substring(2)) + 1;
              }
            }
            statement.execute("PREPARE \"S_" + next + "\" AS SELECT 1");
          }
          case NAME_HOLDS_STATEMENT_WITHOUT_PARAMETERS, NAME_HOLDS_STATEMENT_OF_OTHER_TYPES -> {
            String types = String.join(", ", java.util.Collections.nCopies(8, "bigint"));
            String params =
                String.join(", ", IntStream.rangeClosed(1, 8).mapToObj(i -> "$" + i).toList());
            for (String name : names) {
              statement.execute("DEALLOCATE \"" + name + "\"");
              statement.execute(
                  fault == Fault.NAME_HOLDS_STATEMENT_WITHOUT_PARAMETERS
                      ? "PREPARE \"" + name + "\" AS SELECT 1"
                      : "PREPARE \"" + name + "\"(" + types + ") AS SELECT " + params);
            }
          }
        }
      }
    }
  }
}
