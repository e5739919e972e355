package io.consumerdedup.jdbc.internal;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStoreDataException;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.core.DedupStoreUnavailableException;
import io.github.resilience4j.core.IntervalFunction;
import io.github.resilience4j.retry.Retry;
import io.github.resilience4j.retry.RetryConfig;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.Savepoint;
import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.Executor;
import javax.sql.DataSource;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;

/**
 * How the store, its admin and its janitor run their statements: each call on a connection of its
 * own, in its own transaction, with a query timeout on every statement and a network timeout on the
 * connection, transient errors retried with exponential back-off and jitter within a time budget,
 * and every SQL error mapped to a store exception by what it says about the next try ({@link
 * SqlStates}). Behind a connection pooler the call's statements are unnamed server-side statements;
 * data the database refuses is sent once more, on a fresh statement, before the call says so.
 */
public final class StoreCalls {

  /** Runs the driver's network-timeout callback on the calling thread: nothing to hand off. */
  private static final Executor SAME_THREAD = Runnable::run;

  /**
   * Marks the text of a statement tried once more: pgjdbc would reuse a named server-side statement
   * it has for the same text, and that statement may be what refused the data.
   */
  private static final String FRESH_STATEMENT = "/* consumer-dedup: once more */ ";

  /**
   * The longest statement timeout used, whatever is configured: {@code Integer.MAX_VALUE / 1000}
   * seconds (about 24.8 days), whose milliseconds still fit an int. MySQL Connector/J keeps the
   * query timeout's seconds times 1000 in an int: beyond this it wrapped around, to a negative
   * delay its cancel timer refused on every statement, or to a shorter timeout. It is the bound of
   * the network timeout too, and well within the nanoseconds the statement watchdog counts in.
   */
  private static final Duration LONGEST_STATEMENT_TIMEOUT =
      Duration.ofSeconds(Integer.MAX_VALUE / 1000);

  /** How long a call may take and how often it is tried. */
  public record Limits(
      int retryMaxAttempts,
      Duration retryInitialBackoff,
      Duration retryMaxBackoff,
      Duration retryMaxDuration,
      Duration statementTimeout) {}

  /** Work on a connection that a call lends. */
  @FunctionalInterface
  public interface SqlWork<T> {
    T run(Connection connection) throws SQLException;
  }

  /** Work of a call: on the connection it lends, in the database's dialect. */
  @FunctionalInterface
  public interface Call<T> {
    T run(Connection connection, Dialect dialect) throws SQLException;
  }

  /** Chooses the dialect, once, from the first connection the calls get. */
  @FunctionalInterface
  public interface DialectChoice {
    /**
     * The dialect of the database behind {@code connection}, whose statements {@code calls} run.
     *
     * @throws io.consumerdedup.core.DedupConfigurationException if no dialect speaks to that
     *     database
     */
    Dialect choose(Connection connection, StoreCalls calls) throws SQLException;
  }

  private final DataSource callersConnections;
  private final DataSource ownConnections;
  private final String table;
  private final Duration statementTimeout;

  /**
   * Twice the statement timeout, in milliseconds, at most {@code Integer.MAX_VALUE} (about 24.8
   * days): the connection's network timeout.
   */
  private final int networkTimeoutMillis;

  private final Duration retryMaxDuration;
  private final Retry retry;
  private final Logger log;
  private final DialectChoice dialectChoice;

  /** Chosen on the first connection. */
  private volatile @Nullable Dialect dialect;

  /** The connections reach the database through a pooler (see {@link PostgresPooler}). */
  private volatile boolean pooled;

  /**
   * Set on the thread of a call in the caller's transaction until its connection has prepared a
   * statement (see {@link #inCallersTransaction}).
   */
  @SuppressWarnings("ThreadLocalUsage")
  private final ThreadLocal<Boolean> untilFirstStatement = new ThreadLocal<>();

  /** Set on the thread of a call tried once more after its data was refused. */
  @SuppressWarnings("ThreadLocalUsage")
  private final ThreadLocal<Boolean> freshStatements = new ThreadLocal<>();

  /**
   * @param callersConnections the DataSource as the user gave it: in mode TRANSACTIONAL its
   *     connection is the caller's, in the caller's open transaction
   * @param ownConnections where a call takes a connection of its own (a pool)
   * @param table the table the calls work on, named in their errors
   * @param log where the calls say what they retry and what they detect (the store's logger)
   */
  public StoreCalls(
      DataSource callersConnections,
      DataSource ownConnections,
      String table,
      Limits limits,
      Logger log,
      DialectChoice dialectChoice) {
    this.callersConnections = callersConnections;
    this.ownConnections = ownConnections;
    this.table = table;
    // A timeout long enough to mean "none" (a year) is taken as the longest the driver takes:
    // cast to an int, it wrapped around to a negative network timeout, which the driver refused on
    // every call (pgjdbc with SQL state 22023, read as data the database refused, so every record
    // was dead-lettered), or to a short one, which cut the connection under a slow statement.
    this.statementTimeout = min(limits.statementTimeout(), LONGEST_STATEMENT_TIMEOUT);
    this.networkTimeoutMillis =
        (int) Math.min(Integer.MAX_VALUE, statementTimeout.multipliedBy(2).toMillis());
    this.retryMaxDuration = limits.retryMaxDuration();
    this.log = log;
    this.dialectChoice = dialectChoice;
    RetryConfig config =
        RetryConfig.custom()
            .maxAttempts(limits.retryMaxAttempts())
            .intervalFunction(
                IntervalFunction.ofExponentialRandomBackoff(
                    limits.retryInitialBackoff(), 2.0, 0.5, limits.retryMaxBackoff()))
            // A try that outlasts the call's budget (a long wait for a pooled connection while the
            // database is down) is not repeated: every call returns in bounded time.
            .retryOnException(e -> e instanceof TransientFailure failure && failure.withinBudget)
            .failAfterMaxAttempts(false)
            .build();
    this.retry = Retry.of("consumer-dedup-store", config);
    this.retry
        .getEventPublisher()
        .onRetry(
            event ->
                log.warn(
                    "Transient database error on {} (try {}), retrying in {}: {}",
                    table,
                    event.getNumberOfRetryAttempts(),
                    event.getWaitInterval(),
                    String.valueOf(event.getLastThrowable().getCause())));
  }

  /** The resilience4j retry of the calls, for its metrics. */
  public Retry retry() {
    return retry;
  }

  /**
   * Runs one operation on a connection of its own, in its own transaction, retrying transient
   * errors. Data the database refuses is sent once more on a fresh, unnamed statement before the
   * call says so: a valid record must not be dead-lettered because a named server-side statement of
   * another client (behind a pooler that was not detected) took its parameters.
   *
   * @param key the key of a one-key call, named in its errors; null for others
   */
  public <T> T run(String operation, @Nullable DedupKey key, Call<T> work) {
    try {
      return runWithRetries(operation, key, work);
    } catch (DedupStoreDataException refused) {
      log.warn(
          "The database refused the data of a store {} on {}; trying once more on a fresh"
              + " statement: {}",
          operation,
          table,
          refused.getMessage());
      freshStatements.set(Boolean.TRUE);
      try {
        return runWithRetries(operation, key, work);
      } finally {
        freshStatements.remove();
      }
    }
  }

  /**
   * {@link #run} in one try, without retries: for a start-up or health check, which must answer at
   * once.
   */
  public <T> T runOnce(String operation, @Nullable DedupKey key, Call<T> work) {
    try {
      return attempt(operation, key, work, System.nanoTime());
    } catch (TransientFailure e) {
      throw SqlStates.storeException(what(operation), key, e.getCause());
    }
  }

  private <T> T runWithRetries(String operation, @Nullable DedupKey key, Call<T> work) {
    long deadline = System.nanoTime() + retryMaxDuration.toNanos();
    int[] tries = {0};
    try {
      return retry.executeSupplier(
          () -> {
            tries[0]++;
            return attempt(operation, key, work, deadline);
          });
    } catch (TransientFailure e) {
      throw new DedupStoreUnavailableException(
          what(operation)
              + " failed after "
              + tries[0]
              + (tries[0] == 1 ? " try: " : " tries: ")
              + e.getCause().getMessage(),
          key,
          null,
          e.getCause());
    }
  }

  /**
   * A connection of {@code connections} for a call; not retried when the DataSource throws a {@code
   * RuntimeException}: nothing says a second try would get one. Nor when no driver accepts the
   * DataSource's URL (a DataSource that asks {@code DriverManager} for each connection, given
   * another URL after the build checked the table): every try is refused the same way, at once.
   *
   * @throws DedupStoreUnavailableException naming what the DataSource threw, its cause
   * @throws DedupStoreException no driver accepts the URL (see {@link SqlStates#noDriver})
   */
  private Connection connection(DataSource connections, String operation, @Nullable DedupKey key)
      throws SQLException {
    try {
      return connections.getConnection();
    } catch (SQLException | RuntimeException e) {
      DedupStoreException noDriver = SqlStates.noDriver(what(operation), key, e);
      if (noDriver != null) {
        throw noDriver;
      }
      if (e instanceof RuntimeException noConnection) {
        throw SqlStates.noConnection(what(operation), key, noConnection);
      }
      throw e;
    }
  }

  private <T> T attempt(
      String operation, @Nullable DedupKey key, Call<T> work, long retryDeadline) {
    try (Connection connection = connection(ownConnections, operation, key)) {
      boolean autoCommit;
      int networkTimeout;
      try {
        autoCommit = connection.getAutoCommit();
        networkTimeout = connection.getNetworkTimeout();
      } catch (RuntimeException e) {
        // A connection lent before the DataSource found one (Spring's
        // LazyConnectionDataSourceProxy over a routing DataSource) throws what getConnection()
        // would have at its first call that needs one.
        throw SqlStates.noConnection(what(operation), key, e);
      }
      // Longer than the statement timeout, so a slow statement is cancelled by the server first;
      // it catches a connection that no longer answers at all.
      connection.setNetworkTimeout(SAME_THREAD, networkTimeoutMillis);
      if (!autoCommit) {
        connection.setAutoCommit(true);
      }
      Dialect known;
      try {
        // In auto-commit mode, so that the first connection's look at a pooler may open and roll
        // back a transaction of its own (PostgresPooler#requireTransactions), whatever mode the
        // pool lends its connections in; and under the network timeout, which that look's
        // statements (not the call's, so not watched) otherwise waited without on a connection
        // that no longer answers.
        known = dialect(connection);
      } catch (SQLException | RuntimeException | Error e) {
        restore(connection, autoCommit, networkTimeout, -1, e);
        throw e;
      }
      // Behind a pooler every statement of the call is unnamed, COMMIT and ROLLBACK included:
      // pgjdbc names those by the connection's threshold, not a statement's.
      int prepareThreshold = pooled ? PostgresPooler.unnameStatements(connection) : -1;
      T result;
      try {
        result = work.run(connection, known);
      } catch (SQLException | RuntimeException | Error e) {
        // The connection may be broken now; what broke it is the error to report. It goes back to
        // the pool as it was lent all the same: not every pool resets what a borrower changed.
        restore(connection, autoCommit, networkTimeout, prepareThreshold, e);
        if (e instanceof SQLException refused && SqlStates.isReadOnlyServer(refused)) {
          discard(connection, refused);
        }
        throw e;
      }
      restore(connection, autoCommit, networkTimeout, prepareThreshold, null);
      return result;
    } catch (SQLException e) {
      if (SqlStates.isTransient(e)) {
        TransientFailure failure = new TransientFailure(e);
        failure.withinBudget = System.nanoTime() - retryDeadline < 0;
        throw failure;
      }
      throw SqlStates.storeException(what(operation), key, e);
    }
  }

  /**
   * Closes the physical connection of {@code connection}, which reaches a server that refuses
   * writes, so that its pool replaces it. Kept, it stayed in the pool for its whole lifetime (30
   * minutes in HikariCP): after a failover whose address moved a moment late, every call that was
   * lent it was refused long after the promoted primary took writes.
   */
  private void discard(Connection connection, SQLException refused) {
    try {
      connection.abort(SAME_THREAD);
      log.warn(
          "A connection of the dedup table {} reaches a server that refuses writes (a standby, or a"
              + " primary demoted by a failover): closed, so that its pool opens another",
          table);
    } catch (SQLException | RuntimeException e) {
      refused.addSuppressed(e);
    }
  }

  /**
   * Hands the connection back as it was lent. After {@code failure} a broken connection cannot be
   * restored, and the pool discards it anyway: its own error then only rides along.
   */
  private static void restore(
      Connection connection,
      boolean autoCommit,
      int networkTimeout,
      int prepareThreshold,
      @Nullable Throwable failure)
      throws SQLException {
    try {
      if (!autoCommit) {
        connection.setAutoCommit(false);
      }
      connection.setNetworkTimeout(SAME_THREAD, networkTimeout);
      if (prepareThreshold >= 0) {
        PostgresPooler.setPrepareThreshold(connection, prepareThreshold);
      }
    } catch (SQLException e) {
      if (failure == null) {
        throw e;
      }
      failure.addSuppressed(e);
    }
  }

  /**
   * Runs {@code work} on the caller's transactional connection, as the DataSource hands it out (for
   * Spring, a {@code TransactionAwareDataSourceProxy}); never commits, and never retries, since a
   * failed statement has already doomed the caller's transaction.
   *
   * @param key the key of a one-key call, named in its errors; null for others
   */
  public <T> T inCallersTransaction(String operation, @Nullable DedupKey key, Call<T> work) {
    try (Connection connection = connection(callersConnections, operation, key)) {
      // A connection lent before the DataSource found one (Spring's LazyConnectionDataSourceProxy
      // over a routing DataSource) opens the caller's transaction without a target and throws
      // what getConnection() would have at its first call that needs one: the dialect's first
      // look, or the call's first statement. Passed on as it came, it was taken for the handler's
      // failure, which never ran, and the record was dead-lettered.
      untilFirstStatement.set(Boolean.TRUE);
      try {
        Dialect known = dialect(connection);
        requireUnnamedHandlerStatements(connection, key);
        return work.run(connection, known);
      } catch (RuntimeException e) {
        if (untilFirstStatement.get() != null && !(e instanceof DedupException)) {
          throw SqlStates.noConnection(what(operation), key, e);
        }
        throw e;
      } finally {
        untilFirstStatement.remove();
      }
    } catch (SQLException e) {
      throw SqlStates.storeException(what(operation), key, e);
    }
  }

  /**
   * Refuses, on a connection as the pool lends it, a pooler that would hand a handler's own
   * statements in mode TRANSACTIONAL to another server connection; a database that cannot be
   * reached now, or whose DataSource throws a {@code RuntimeException} for a connection, is left to
   * the next check.
   *
   * @throws DedupConfigurationException behind a pooler with named server-side statements
   */
  public void requireUnnamedHandlerStatements() {
    try (Connection connection = ownConnections.getConnection()) {
      // Bounded as a call's statements are: on a connection that no longer answers, the first
      // look at the database (dialect) waited for good, and the executor's build with it.
      int networkTimeout = connection.getNetworkTimeout();
      connection.setNetworkTimeout(SAME_THREAD, networkTimeoutMillis);
      try {
        dialect(connection);
        requireUnnamedHandlerStatements(connection, null);
      } finally {
        try {
          connection.setNetworkTimeout(SAME_THREAD, networkTimeout);
        } catch (SQLException e) {
          // A connection that broke: the pool discards it, and a refusal above stands.
        }
      }
    } catch (SQLException e) {
      // The table check meets the same database and says so; each claim checks again.
    } catch (RuntimeException e) {
      if (e instanceof DedupException) {
        throw e; // the refusal above, or a database no dialect speaks to
      }
      // A DataSource that says "not now" without an SQLException (a routing DataSource without a
      // target for this thread, or a lazy connection over one; a pool behind an open circuit
      // breaker), as a claim takes it: thrown on, it stopped the build, and with it an
      // application that mode SEPARATE starts, its records waiting for the database.
    }
  }

  /**
   * Refuses a connection behind a pooler on which a handler's statements would be named server-side
   * statements: in mode TRANSACTIONAL they run on the claim's connection, and a pooler in
   * transaction mode hands them to server connections that lack them or hold another client's.
   */
  private void requireUnnamedHandlerStatements(Connection connection, @Nullable DedupKey key)
      throws SQLException {
    if (pooled && PostgresPooler.namesStatements(connection)) {
      throw new DedupConfigurationException(
          "The dedup table's DataSource reaches PostgreSQL through a connection pooler (such as"
              + " PgBouncer), where the handler's own statements in DedupMode.TRANSACTIONAL would"
              + " become named server-side statements and, in transaction pool mode, fail on"
              + " another server connection (SQL states 26000, 42P05, 08P01). Add"
              + " prepareThreshold=0 to the JDBC URL (pgjdbc then uses unnamed statements); with"
              + " PgBouncer 1.21+ and max_prepared_statements named statements work, but this"
              + " check cannot tell, so set prepareThreshold=0 there too",
          key,
          null);
    }
  }

  /**
   * The dialect of the database behind {@code connection}: chosen on the first connection, which
   * also tells whether a pooler stands between the calls and the database.
   */
  private Dialect dialect(Connection connection) throws SQLException {
    Dialect known = dialect;
    if (known != null) {
      return known;
    }
    Dialect chosen = dialectChoice.choose(connection, this);
    if (chosen.behindPooler(connection)) {
      if (!pooled) {
        log.info(
            "The dedup table {} is reached through a connection pooler: the store's own statements"
                + " are unnamed server-side statements, which a pooler in transaction mode cannot"
                + " hand to another client",
            table);
      }
      pooled = true;
    }
    dialect = chosen;
    return chosen;
  }

  /**
   * Prepares a statement of a call: cancelled once it outruns the statement timeout, unnamed behind
   * a pooler.
   */
  public PreparedStatement prepare(Connection connection, String statementSql) throws SQLException {
    boolean fresh = Boolean.TRUE.equals(freshStatements.get());
    PreparedStatement statement =
        connection.prepareStatement(fresh ? FRESH_STATEMENT + statementSql : statementSql);
    // The connection has its target now: what it throws later is no longer a missing connection.
    untilFirstStatement.remove();
    if (pooled || fresh) {
      PostgresPooler.useUnnamed(statement);
    }
    // pgjdbc's query timeout wakes its timer thread at every execution; one watchdog thread
    // cancels the store's statements instead (StatementWatchdog).
    if (!StatementWatchdog.canWatch(statement)
        || !StatementWatchdog.SHARED.watch(statement, statementTimeout)) {
      statement.setQueryTimeout(timeoutSeconds(statementTimeout));
    }
    return statement;
  }

  /** Whole seconds, rounded up: at most {@link #LONGEST_STATEMENT_TIMEOUT}'s, which it is under. */
  private static int timeoutSeconds(Duration timeout) {
    return (int) Math.max(1, (timeout.toMillis() + 999) / 1000);
  }

  private static Duration min(Duration a, Duration b) {
    return a.compareTo(b) <= 0 ? a : b;
  }

  private String what(String operation) {
    return "Dedup store " + operation + " on table " + table;
  }

  /**
   * Runs {@code work} in a transaction of its own on an auto-commit connection: commits it, or
   * rolls it back on failure, and hands the connection back in auto-commit mode.
   */
  public static <T> T inOwnTransaction(Connection connection, SqlWork<T> work) throws SQLException {
    return inOwnTransaction(connection, work, Connection::commit);
  }

  /**
   * {@link #inOwnTransaction}, its COMMIT sent as a statement of the call, which the statement
   * timeout cancels as it does the others (for PostgreSQL: other databases' query timeouts are not
   * known to apply to a COMMIT). With synchronous replication and the standby away, a COMMIT waits
   * until it is cancelled, and a cancel ends the wait with the transaction committed on the primary
   * (and a warning). Left to the connection's commit, nothing cancelled it: the client gave up at
   * the network timeout, while the server went on waiting with the transaction's row locks held, so
   * that every later write of those keys waited on them and was cancelled at each try, for as long
   * as the standby was away.
   */
  public <T> T inOwnTransactionCommittedInTime(Connection connection, SqlWork<T> work)
      throws SQLException {
    return inOwnTransaction(
        connection,
        work,
        c -> {
          try (PreparedStatement commit = prepare(c, "COMMIT")) {
            commit.execute();
          }
        });
  }

  private static <T> T inOwnTransaction(Connection connection, SqlWork<T> work, Commit commit)
      throws SQLException {
    connection.setAutoCommit(false);
    T result;
    try {
      result = work.run(connection);
      commit.run(connection);
    } catch (SQLException | RuntimeException | Error e) {
      // On a broken connection these fail too; the error that broke it is the one to report (its
      // SQL state says whether a retry may succeed). An Error (an OutOfMemoryError as an answer is
      // read) is no exception: a pool that hands connections on as they come back would keep the
      // transaction open, its row locks stopping every other writer of those keys.
      try {
        connection.rollback();
        connection.setAutoCommit(true);
      } catch (SQLException | RuntimeException | Error cleanup) {
        e.addSuppressed(cleanup);
      }
      throw e;
    }
    connection.setAutoCommit(true);
    return result;
  }

  /**
   * Runs {@code work}, several statements in the caller's open transaction, under a savepoint: when
   * it fails, its writes are rolled back and the rest of the transaction is left as it was. A
   * caller that catches the failure and commits its other work (as it may) would otherwise commit
   * what the statements before the failed one wrote: dedup rows of records that were never handled.
   */
  public static <T> T underSavepoint(Connection connection, SqlWork<T> work) throws SQLException {
    Savepoint savepoint = connection.setSavepoint();
    T result;
    try {
      result = work.run(connection);
    } catch (SQLException | RuntimeException | Error e) {
      try {
        connection.rollback(savepoint);
      } catch (SQLException | RuntimeException | Error cleanup) {
        // InnoDB rolls the whole transaction back at a deadlock, the savepoint with it: nothing of
        // the work is left to undo.
        e.addSuppressed(cleanup);
      }
      throw e;
    }
    connection.releaseSavepoint(savepoint);
    return result;
  }

  /** How a transaction of a call commits. */
  @FunctionalInterface
  private interface Commit {
    void run(Connection connection) throws SQLException;
  }

  /** A transient SQL error on its way through the retry. */
  private static final class TransientFailure extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /** Whether the call may still be tried again. */
    transient boolean withinBudget = true;

    TransientFailure(SQLException cause) {
      super(cause);
    }

    @Override
    public synchronized SQLException getCause() {
      return (SQLException) Objects.requireNonNull(super.getCause());
    }
  }
}
