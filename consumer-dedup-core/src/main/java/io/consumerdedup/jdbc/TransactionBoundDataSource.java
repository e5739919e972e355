package io.consumerdedup.jdbc;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.DedupStoreDataException;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.core.DedupStoreUnavailableException;
import io.consumerdedup.core.internal.AfterCommit;
import io.consumerdedup.jdbc.internal.AbortedTransactions;
import io.consumerdedup.jdbc.internal.SqlStates;
import io.consumerdedup.kafka.internal.LostLines;
import java.io.PrintWriter;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.SQLFeatureNotSupportedException;
import java.sql.Savepoint;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.logging.Logger;
import javax.sql.DataSource;
import org.jspecify.annotations.Nullable;
import org.slf4j.LoggerFactory;

/**
 * A DataSource bound to the current thread's JDBC transaction: what {@link DedupMode#TRANSACTIONAL}
 * needs from plain JDBC, without Spring. {@link #inTransaction} takes a connection from the pool,
 * opens a transaction on it and binds it to the calling thread; while the work runs, every {@link
 * #getConnection()} on that thread returns that connection, so the dedup store's claim and the
 * handler's own writes land in one transaction and commit or roll back together. (Spring's {@code
 * DataSourceTransactionManager} and {@code TransactionAwareDataSourceProxy} do the same between
 * them; Spring applications use those.)
 *
 * <pre>{@code
 * TransactionBoundDataSource transactions = TransactionBoundDataSource.of(pool);
 * IdempotentExecutor executor = IdempotentExecutor
 *     .builder(JdbcDedupStore.builder(transactions).build())  // claims in the caller's transaction
 *     .mode(DedupMode.TRANSACTIONAL)
 *     .build();
 * Ledger ledger = new Ledger(transactions);                   // your writes: the same transaction
 *
 * DedupResult<Receipt> result = transactions.inTransaction(() ->
 *     executor.execute(DedupKey.of("payment", orderNo), () -> ledger.charge(order)));
 * }</pre>
 *
 * <p>With {@link io.consumerdedup.kafka.DedupPollLoop}, wrap the record handler in a {@link
 * io.consumerdedup.kafka.JdbcTransactionalProcessor}, which runs each record in {@code
 * inTransaction}; its documentation shows the whole loop.
 *
 * <p>Only the work inside {@code inTransaction} may use this DataSource: outside it {@link
 * #getConnection()} fails, rather than hand out a connection that commits on its own. Keep using
 * the pool for everything else (a janitor, reports, a store in mode SEPARATE). The connection it
 * hands out belongs to the transaction: its {@code close()} leaves the transaction open, and {@code
 * commit()}, {@code rollback()}, {@code setAutoCommit(true)} and {@code abort} on it are refused,
 * since ending the transaction half-way would let the dedup row and the writes commit apart
 * (savepoints are allowed). The same holds for the connection its statements, result sets and
 * metadata return, and {@code unwrap} gives a vendor interface such as {@code PGConnection} but not
 * the driver's connection itself. It refuses any use once its transaction has ended. (A {@code
 * COMMIT} sent as SQL text is the server's to obey: do not send one.)
 *
 * <p>Before the commit, a dedup store over this DataSource has the transaction's first claim still
 * in it read (on MySQL/MariaDB; on PostgreSQL nothing is read): InnoDB rolls the whole transaction
 * back at a deadlock, and work that caught the deadlock and went on would commit its later writes
 * without the dedup rows. Such a commit is refused. A rollback to a savepoint set through the
 * connection's {@code setSavepoint} takes the claims made since out of that check; one sent as SQL
 * text is not seen, and the claim it undid refuses the commit.
 *
 * <p>Thread-safe: each thread has its own transaction, so one instance serves any number of
 * consumers. One transaction per thread at a time: {@code inTransaction} inside {@code
 * inTransaction} is refused.
 */
public final class TransactionBoundDataSource implements DataSource {
  private static final org.slf4j.Logger log =
      LoggerFactory.getLogger(TransactionBoundDataSource.class);

  private final DataSource pool;

  // Per instance on purpose: each DataSource has its own transaction per thread.
  @SuppressWarnings("ThreadLocalUsage")
  private final ThreadLocal<@Nullable Transaction> current = new ThreadLocal<>();

  private TransactionBoundDataSource(DataSource pool) {
    this.pool = pool;
  }

  /**
   * A DataSource whose connections belong to the transaction that {@link #inTransaction} opens on a
   * connection of {@code pool}.
   *
   * @param pool where connections come from, such as a HikariCP pool on the dedup table's database
   * @throws IllegalArgumentException if {@code pool} is itself a TransactionBoundDataSource
   */
  public static TransactionBoundDataSource of(DataSource pool) {
    Objects.requireNonNull(pool, "pool");
    if (pool instanceof TransactionBoundDataSource) {
      throw new IllegalArgumentException(
          "pool is already a TransactionBoundDataSource; give it the pool of connections itself");
    }
    return new TransactionBoundDataSource(pool);
  }

  /** The pool its transactions' connections come from; for a store's calls of their own. */
  DataSource pool() {
    return pool;
  }

  /** Work that runs inside {@link #inTransaction}, reaching the transaction through this. */
  @FunctionalInterface
  public interface TransactionalWork<T, X extends Exception> {
    T run() throws X;
  }

  /**
   * Runs {@code work} in a new transaction on a connection of the pool, bound to this thread: when
   * it returns, commits; when it throws, rolls back and rethrows the same exception (a rollback
   * that fails is added to it as suppressed). The connection goes back to the pool whatever
   * happens, in auto-commit mode again; one whose rollback failed is aborted instead, so that its
   * unfinished transaction can never be committed by the connection's next user (PostgreSQL rolls
   * back the transaction of a connection that goes away, as it does when this process dies), and so
   * is one whose server refused a write as read-only (SQL state 25006, MySQL errors 1290, 1036), so
   * that the pool opens another, which reaches the primary once a failover has moved its address.
   *
   * <p>A commit whose reply is lost leaves it unknown whether it committed; the exception says so.
   * A redelivery finds out: in mode TRANSACTIONAL a committed dedup row makes it a duplicate, and
   * without one the work runs again.
   *
   * <p>An interrupt of the thread is left for the caller to see; it does not stop the commit, the
   * rollback or the release of the connection.
   *
   * @return what {@code work} returned, once committed
   * @throws X what {@code work} threw, after the rollback
   * @throws DedupConfigurationException if this thread is already inside {@code inTransaction} of
   *     this DataSource: a nested transaction would commit on its own, apart from the outer one
   *     ({@link io.consumerdedup.core.Disposition#RETRY_LATER}: a record whose handler does this
   *     waits for the application to be fixed)
   * @throws DedupStoreUnavailableException the pool gave no connection (or one that threw a {@code
   *     RuntimeException} as the transaction opened, and went back to the pool), or the commit
   *     failed on a lost connection or a transient error such as a serialization failure: retry
   *     later
   * @throws DedupStoreDataException the commit was refused for the data (SQL state class 22 or 23,
   *     such as a deferred constraint): the transaction was rolled back
   * @throws DedupStoreException the transaction could not be opened or committed otherwise
   * @throws IllegalStateException {@code work} returned, but PostgreSQL had aborted the transaction
   *     (a statement of it failed and {@code work} caught the failure): nothing of it could commit,
   *     and it was rolled back; or MySQL/MariaDB had rolled back the transaction of a dedup claim
   *     made in it (InnoDB at a deadlock {@code work} caught), so that what {@code work} wrote
   *     after that would have committed without the claim's row: rolled back. Either is a failure
   *     of the work ({@link io.consumerdedup.core.Disposition#HANDLER_FAILED})
   */
  public <T, X extends Exception> T inTransaction(TransactionalWork<T, X> work) throws X {
    Objects.requireNonNull(work, "work");
    if (current.get() != null) {
      // A set-up mistake, not a failure of the record: taken for the handler's failure, it
      // dead-lettered every record whose handler wraps its writes in a transaction of its own.
      throw new DedupConfigurationException(
          "A transaction of this TransactionBoundDataSource is already open on this thread:"
              + " inTransaction(...) inside inTransaction(...) would commit the inner work apart"
              + " from the outer; run the inner work directly, it joins the open transaction",
          null,
          null);
    }
    Transaction transaction = begin();
    // What a claim in the transaction says of its SUCCESS (the "processed" outcome) is said only
    // once the transaction commits.
    AfterCommit.Scope news;
    try {
      news = AfterCommit.open();
    } catch (RuntimeException | Error e) {
      release(transaction, true); // nothing of it ran
      throw e;
    }
    boolean committed = false;
    // Whether the transaction ended (committed or rolled back) on a connection that still answers.
    boolean reusable = false;
    try {
      // Inside the try: an OutOfMemoryError as the thread-local grows must still hand the
      // connection back and end the scope, or both were lost to the pool and to this thread.
      current.set(transaction);
      T result;
      try {
        result = work.run();
      } catch (Throwable failure) {
        transaction.end();
        // A connection to a server that refuses writes (a standby, a primary demoted by a
        // failover) is sound to the pool, which would lend it for its whole lifetime: every
        // record's transaction on it failed long after the promoted primary took writes.
        reusable = rollBack(transaction, failure) && !refusedWrites(failure);
        throw failure;
      }
      transaction.end();
      if (AbortedTransactions.aborted(transaction.connection())) {
        // pgjdbc's commit of it returned normally having committed nothing: a record whose
        // handler caught its failed statement was passed as applied with neither its writes nor
        // its dedup row, lost without a word.
        IllegalStateException failure =
            new IllegalStateException(
                "The database aborted the transaction before the work returned: a statement of"
                    + " the work failed and its exception was caught instead of thrown out of"
                    + " inTransaction(...), so nothing of the work, a dedup row included, could"
                    + " commit. It is rolled back as the work's failure; let the statement's"
                    + " failure end the work, or run the statement under a savepoint");
        reusable = rollBack(transaction, failure);
        throw failure;
      }
      String refusal;
      try {
        refusal = transaction.refusal();
      } catch (SQLException e) {
        DedupStoreException failure =
            SqlStates.storeException("Checking the transaction before its commit", null, e);
        reusable = rollBack(transaction, failure);
        throw failure;
      }
      if (refusal != null) {
        // MySQL/MariaDB: InnoDB rolled the transaction back under the work (a deadlock it caught)
        // and the work's later statements opened a new one; committed, those writes were applied
        // alone, with no dedup row, and the key's next delivery applied them again.
        IllegalStateException failure = new IllegalStateException(refusal);
        reusable = rollBack(transaction, failure);
        throw failure;
      }
      try {
        transaction.connection().commit();
      } catch (SQLException e) {
        DedupStoreException failure =
            SqlStates.storeException(
                "Committing the transaction (if only the commit's reply was lost, it may have"
                    + " committed: a redelivery finds out)",
                null,
                e);
        // PostgreSQL ends a transaction whose commit failed; the rollback shows whether the
        // connection still answers, and release() aborts it if not.
        reusable = rollBack(transaction, failure);
        throw failure;
      }
      reusable = true;
      committed = true;
      return result;
    } finally {
      current.remove();
      try {
        release(transaction, reusable);
      } finally {
        // Skipped, the scope stayed open on this pooled thread: the committed work's news was
        // never told, and what a later claim outside a transaction of this DataSource said went
        // into it, never told either.
        news.end(committed);
      }
    }
  }

  private Transaction begin() {
    Connection connection;
    try {
      connection = pool.getConnection();
    } catch (SQLException | RuntimeException e) {
      DedupStoreException noDriver = SqlStates.noDriver("Opening a transaction", null, e);
      if (noDriver != null) {
        throw noDriver;
      }
      if (e instanceof RuntimeException noConnection) {
        throw SqlStates.noConnection("Opening a transaction", null, noConnection);
      }
      throw SqlStates.storeException(
          "Opening a transaction (no connection from the pool)", null, (SQLException) e);
    }
    Transaction transaction = null;
    try {
      boolean autoCommit = connection.getAutoCommit();
      if (autoCommit) {
        connection.setAutoCommit(false);
      }
      transaction = new Transaction(connection, autoCommit);
      return transaction;
    } catch (SQLException e) {
      throw SqlStates.storeException("Opening a transaction", null, e);
    } catch (RuntimeException e) {
      // A connection lent before its DataSource found one, or a wrapper whose circuit is open,
      // throws what getConnection() would have: passed on as it came, it was the work's failure,
      // which never ran.
      throw SqlStates.noConnection("Opening a transaction", null, e);
    } finally {
      if (transaction == null) {
        // Whatever was thrown, an Error too (a driver's StackOverflowError in setAutoCommit):
        // the connection goes back to the pool, aborted, since its auto-commit is unknown.
        // Passed on without it, each such Error took a connection from the pool for good.
        release(connection, false, false);
      }
    }
  }

  /** Whether {@code failure} came of a server that refuses writes (25006, MySQL 1290, 1036). */
  private static boolean refusedWrites(Throwable failure) {
    for (Throwable cause = failure; cause != null; cause = cause.getCause()) {
      if (cause instanceof SQLException refused && SqlStates.isReadOnlyServer(refused)) {
        return true;
      }
      if (cause.getCause() == cause) {
        break;
      }
    }
    return false;
  }

  /** Rolls back after {@code failure}; true if the connection is fit to go back to the pool. */
  private static boolean rollBack(Transaction transaction, Throwable failure) {
    try {
      transaction.connection().rollback();
      return true;
    } catch (SQLException | RuntimeException | Error e) {
      // An Error too (an OutOfMemoryError as the reply is read): thrown, it replaced the work's
      // own failure, which is what the caller must be told. The connection is aborted either way.
      failure.addSuppressed(e);
      return false;
    }
  }

  /**
   * Hands the connection back to the pool; never throws, since the transaction's outcome is decided
   * by now and a connection that cannot be reset is the pool's to discard.
   *
   * @param reusable the transaction ended (committed or rolled back) and the connection answered;
   *     otherwise it is aborted, so that nothing of its transaction can be committed later
   */
  private static void release(Transaction transaction, boolean reusable) {
    release(transaction.connection(), transaction.autoCommit(), reusable);
  }

  /**
   * {@link #release(Transaction, boolean)} of a connection whose transaction was not made (opening
   * it threw, an {@code Error} too). The connection is aborted or reset and handed back before
   * anything is logged: after a {@code StackOverflowError} or an {@code OutOfMemoryError} the log
   * call itself may throw, and thrown first it left the connection lent for good.
   */
  private static void release(Connection connection, boolean autoCommit, boolean reusable) {
    Throwable resetFailure = null;
    Throwable closeFailure = null;
    try {
      if (!reusable) {
        connection.abort(Runnable::run);
      } else if (autoCommit) {
        // Only now: setAutoCommit(true) on an open transaction would commit it.
        connection.setAutoCommit(true);
      }
    } catch (SQLException | RuntimeException | Error e) {
      resetFailure = e;
    } finally {
      try {
        connection.close();
      } catch (SQLException | RuntimeException | Error e) {
        // An Error too (an OutOfMemoryError in the pool's bookkeeping): thrown after a commit, it
        // made committed work look failed, and a poll's transaction that committed was run again
        // record by record, each record counted a duplicate of itself and none processed.
        closeFailure = e;
      }
    }
    // Only the lines are left to write, and they must not throw: the connection is handed back.
    if (!reusable) {
      LostLines.warn(
          log,
          "Aborted a connection whose transaction could not be ended, or whose server refuses"
              + " writes; its server session rolls the transaction back",
          null);
    }
    if (resetFailure != null) {
      LostLines.warn(
          log, "Could not reset a connection before handing it back to the pool", resetFailure);
    }
    if (closeFailure != null) {
      LostLines.warn(log, "Could not hand a connection back to the pool", closeFailure);
    }
  }

  /**
   * The connection of this thread's open transaction, for the work inside {@link #inTransaction};
   * closing it leaves the transaction open.
   *
   * @throws SQLException outside {@link #inTransaction}: a connection that commits on its own would
   *     silently break the promise that the dedup row and the writes commit together
   */
  @Override
  public Connection getConnection() throws SQLException {
    Transaction transaction = current.get();
    if (transaction == null) {
      throw new SQLException(
          "No transaction of this TransactionBoundDataSource is open on this thread: run the work"
              + " inside inTransaction(...) (with DedupPollLoop: JdbcTransactionalProcessor), and"
              + " use the pool itself for work outside a record's transaction");
    }
    return transaction.handle();
  }

  /** What must still hold of an open transaction for it to commit. */
  @FunctionalInterface
  interface CommitCheck {
    /**
     * Run on the transaction's connection once the work has returned, before the commit.
     *
     * @return why the transaction must not commit; null if it may
     */
    @Nullable String refusal(Connection connection) throws SQLException;
  }

  /**
   * Adds {@code check} to this thread's open transaction; before the commit, the earliest check of
   * each {@code owner} still in the transaction runs (a rollback to a savepoint set before a check
   * was added takes the check out). Does nothing outside {@link #inTransaction}.
   */
  void checkBeforeCommit(Object owner, CommitCheck check) {
    Transaction transaction = current.get();
    if (transaction != null) {
      transaction.add(owner, check);
    }
  }

  /**
   * Refused: the transaction's connection has the pool's credentials.
   *
   * @throws SQLFeatureNotSupportedException always
   */
  @Override
  public Connection getConnection(String username, String password) throws SQLException {
    throw new SQLFeatureNotSupportedException(
        "The transaction's connection has the pool's credentials; use getConnection()");
  }

  @Override
  public PrintWriter getLogWriter() throws SQLException {
    return pool.getLogWriter();
  }

  @Override
  public void setLogWriter(PrintWriter out) throws SQLException {
    pool.setLogWriter(out);
  }

  @Override
  public void setLoginTimeout(int seconds) throws SQLException {
    pool.setLoginTimeout(seconds);
  }

  @Override
  public int getLoginTimeout() throws SQLException {
    return pool.getLoginTimeout();
  }

  @Override
  public Logger getParentLogger() throws SQLFeatureNotSupportedException {
    return pool.getParentLogger();
  }

  /** This DataSource, or what the pool unwraps to. */
  @Override
  public <T> T unwrap(Class<T> iface) throws SQLException {
    return iface.isInstance(this) ? iface.cast(this) : pool.unwrap(iface);
  }

  @Override
  public boolean isWrapperFor(Class<?> iface) throws SQLException {
    return iface.isInstance(this) || pool.isWrapperFor(iface);
  }

  @Override
  public String toString() {
    return "TransactionBoundDataSource[" + pool + "]";
  }

  /** One open transaction: its connection, and what the connection's auto-commit was. */
  private static final class Transaction {
    private final Connection connection;
    private final boolean autoCommit;
    private volatile boolean open = true;

    /** The checks before the commit, in the order they were added, with their owners. */
    private final List<Map.Entry<Object, CommitCheck>> checks = new ArrayList<>();

    /** How many checks there were when each savepoint of the work was set. */
    private final Map<Savepoint, Integer> savepoints = new IdentityHashMap<>();

    Transaction(Connection connection, boolean autoCommit) {
      this.connection = connection;
      this.autoCommit = autoCommit;
    }

    Connection connection() {
      return connection;
    }

    boolean autoCommit() {
      return autoCommit;
    }

    synchronized void add(Object owner, CommitCheck check) {
      checks.add(Map.entry(owner, check));
    }

    /**
     * Keeps track of the work's savepoints, so that a rollback to one takes out the checks added
     * since it was set: those checks look for rows (dedup claims) the work undid on purpose, and
     * would refuse a commit that is sound.
     */
    private synchronized void savepointCall(
        Method method, Object @Nullable [] args, @Nullable Object result) {
      String name = method.getName();
      if (name.equals("setSavepoint") && result instanceof Savepoint savepoint) {
        savepoints.put(savepoint, checks.size());
      } else if (name.equals("rollback")
          && args != null
          && args[0] instanceof Savepoint savepoint) {
        Integer before = savepoints.get(savepoint);
        if (before != null && before < checks.size()) {
          checks.subList(before, checks.size()).clear();
        }
      }
    }

    /**
     * Why the transaction must not commit, by the first check that refuses it; null if none. Only
     * the earliest check of each owner runs: what took that one's row away (InnoDB rolling the
     * transaction back) took every later one's too, and each further check is a round trip.
     */
    @Nullable String refusal() throws SQLException {
      List<Map.Entry<Object, CommitCheck>> earliest = new ArrayList<>();
      synchronized (this) {
        Map<Object, Boolean> owners = new IdentityHashMap<>();
        for (Map.Entry<Object, CommitCheck> check : checks) {
          if (owners.put(check.getKey(), Boolean.TRUE) == null) {
            earliest.add(check);
          }
        }
      }
      for (Map.Entry<Object, CommitCheck> check : earliest) {
        String refusal = check.getValue().refusal(connection);
        if (refusal != null) {
          return refusal;
        }
      }
      return null;
    }

    /** After this, the handles handed out refuse every call: the transaction is over. */
    void end() {
      open = false;
    }

    /** A handle on the connection for the work; each has its own {@code close()}. */
    Connection handle() {
      boolean[] closed = {false};
      return (Connection)
          Proxy.newProxyInstance(
              Connection.class.getClassLoader(),
              new Class<?>[] {Connection.class},
              (proxy, method, args) -> {
                return switch (method.getName()) {
                  case "close" -> {
                    closed[0] = true;
                    yield null;
                  }
                  case "isClosed" -> closed[0] || !open || connection.isClosed();
                  case "equals" -> proxy == args[0];
                  case "hashCode" -> System.identityHashCode(proxy);
                  case "toString" -> "connection of a transaction of TransactionBoundDataSource";
                  default -> {
                    checkUsable(method, args, closed[0]);
                    Object result = guardedResult(method, args, connection, (Connection) proxy);
                    savepointCall(method, args, result);
                    yield result;
                  }
                };
              });
    }

    /**
     * Calls {@code method} on {@code target} (the connection, or a statement, result set or
     * metadata reached from it) and guards what it returns: the statements, result sets and
     * metadata hand out {@code handle} as their connection, and an {@code unwrap} to a vendor
     * interface gets only that interface. Handed out bare, any of them led to the connection
     * itself, whose {@code commit()} committed the dedup row and the writes so far while the work
     * went on: a failure after it rolled back nothing, and the redelivery applied the writes again.
     */
    private @Nullable Object guardedResult(
        Method method, Object @Nullable [] args, Object target, Connection handle)
        throws Throwable {
      if (method.getName().equals("unwrap") && args != null && args[0] instanceof Class<?> type) {
        Object unwrapped = invoke(method, args, target);
        if (!reachesTheConnection(unwrapped)) {
          return unwrapped;
        }
        if (!type.isInterface()) {
          throw new SQLException(
              "unwrap("
                  + type.getName()
                  + ") is refused: the object behind this TransactionBoundDataSource connection"
                  + " could end its transaction; unwrap to an interface instead, such as"
                  + " org.postgresql.PGConnection");
        }
        return guard(Objects.requireNonNull(unwrapped), type, handle);
      }
      Object result = invoke(method, args, target);
      Class<?> type = method.getReturnType();
      return reachesTheConnection(result) && type.isInterface()
          ? guard(Objects.requireNonNull(result), type, handle)
          : result;
    }

    private static boolean reachesTheConnection(@Nullable Object result) {
      return result instanceof Connection
          || result instanceof Statement
          || result instanceof ResultSet
          || result instanceof DatabaseMetaData;
    }

    /** {@code target} seen only as {@code type}, with {@code handle} as its connection. */
    private Object guard(Object target, Class<?> type, Connection handle) {
      return Proxy.newProxyInstance(
          type.getClassLoader(),
          new Class<?>[] {type},
          (proxy, method, args) -> {
            String name = method.getName();
            return switch (name) {
              case "equals" -> proxy == args[0];
              case "hashCode" -> System.identityHashCode(proxy);
              case "toString" -> target.toString();
              case "close", "isClosed" -> invoke(method, args, target);
              default -> {
                checkUsable(method, args, false);
                yield name.equals("getConnection") && method.getParameterCount() == 0
                    ? handle
                    : guardedResult(method, args, target, handle);
              }
            };
          });
    }

    private void checkUsable(Method method, Object @Nullable [] args, boolean closed)
        throws SQLException {
      if (closed || !open) {
        throw new SQLException(
            closed
                ? "This connection handle was closed"
                : "The transaction this connection belonged to has ended; get a connection inside"
                    + " inTransaction(...), and do not keep it after the work returns");
      }
      String name = method.getName();
      boolean endsTransaction =
          (name.equals("commit") || name.equals("rollback")) && method.getParameterCount() == 0;
      boolean autoCommitOn =
          name.equals("setAutoCommit") && args != null && Boolean.TRUE.equals(args[0]);
      if (endsTransaction || autoCommitOn || name.equals("abort")) {
        throw new SQLException(
            name
                + " is refused: this connection's transaction is committed or rolled back by"
                + " TransactionBoundDataSource.inTransaction, so that everything in it commits"
                + " together (throw to roll back; use the pool itself for code that manages its"
                + " own transactions, such as a dedup store in mode SEPARATE)");
      }
    }

    private static @Nullable Object invoke(Method method, Object @Nullable [] args, Object target)
        throws Throwable {
      try {
        return method.invoke(target, args);
      } catch (InvocationTargetException e) {
        throw e.getCause();
      }
    }
  }
}
