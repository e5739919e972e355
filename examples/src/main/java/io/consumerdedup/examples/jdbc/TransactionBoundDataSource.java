package io.consumerdedup.examples.jdbc;

import java.io.PrintWriter;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.SQLFeatureNotSupportedException;
import java.util.logging.Logger;
import javax.sql.DataSource;
import org.jspecify.annotations.Nullable;

/**
 * What {@code DedupMode.TRANSACTIONAL} needs from a DataSource, in plain JDBC: {@link
 * #inTransaction} opens a transaction on a connection from the pool and binds it to the current
 * thread; while the work runs, every {@link #getConnection()} on that thread returns that same
 * connection, whose {@code close()} does nothing. So the dedup store's claim and the handler's own
 * writes land in one transaction, and commit or roll back together. Spring's {@code
 * DataSourceTransactionManager} and {@code TransactionAwareDataSourceProxy} do the same between
 * them.
 *
 * <p>Give this DataSource to the {@code JdbcDedupStore} of a TRANSACTIONAL executor and to the
 * handler's data access; keep the pool for everything outside a record's transaction.
 */
public final class TransactionBoundDataSource implements DataSource {
  private final DataSource pool;
  private final ThreadLocal<@Nullable Connection> current = new ThreadLocal<>();

  public TransactionBoundDataSource(DataSource pool) {
    this.pool = pool;
  }

  /** Work that runs on the transaction's connection, reached through this DataSource. */
  @FunctionalInterface
  public interface TransactionalWork<T> {
    T run() throws Exception;
  }

  /**
   * Runs {@code work} in a new transaction: commits it when {@code work} returns, rolls it back
   * when it throws (and rethrows). A process that dies meanwhile never commits: PostgreSQL rolls
   * the transaction back when the connection drops.
   *
   * @throws IllegalStateException if this thread is already inside {@code inTransaction}
   */
  public <T> T inTransaction(TransactionalWork<T> work) throws Exception {
    if (current.get() != null) {
      throw new IllegalStateException("A transaction is already open on this thread");
    }
    try (Connection connection = pool.getConnection()) {
      connection.setAutoCommit(false);
      current.set(connection);
      T result;
      try {
        result = work.run();
      } catch (Throwable error) {
        try {
          connection.rollback();
          connection.setAutoCommit(true);
        } catch (SQLException rollbackError) {
          error.addSuppressed(rollbackError);
        }
        throw error;
      } finally {
        current.remove();
      }
      connection.commit();
      // Back to the pool as it came out of it.
      connection.setAutoCommit(true);
      return result;
    }
  }

  /**
   * The connection of this thread's open transaction; closing it leaves the transaction open.
   *
   * @throws SQLException outside {@link #inTransaction}: work on this DataSource belongs in a
   *     transaction, and silently handing out an auto-commit connection would hide that mistake
   */
  @Override
  public Connection getConnection() throws SQLException {
    Connection connection = current.get();
    if (connection == null) {
      throw new SQLException(
          "No transaction is open on this thread: run the work inside inTransaction(...)");
    }
    return (Connection)
        Proxy.newProxyInstance(
            Connection.class.getClassLoader(),
            new Class<?>[] {Connection.class},
            (proxy, method, args) -> {
              if (method.getName().equals("close")) {
                return null;
              }
              try {
                return method.invoke(connection, args);
              } catch (InvocationTargetException e) {
                throw e.getCause();
              }
            });
  }

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

  @Override
  public <T> T unwrap(Class<T> iface) throws SQLException {
    if (iface.isInstance(this)) {
      return iface.cast(this);
    }
    throw new SQLException("Not a wrapper of " + iface.getName());
  }

  @Override
  public boolean isWrapperFor(Class<?> iface) {
    return iface.isInstance(this);
  }
}
