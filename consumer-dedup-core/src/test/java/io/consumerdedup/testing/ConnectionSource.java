package io.consumerdedup.testing;

import java.io.PrintWriter;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.sql.SQLFeatureNotSupportedException;
import java.sql.SQLTransientConnectionException;
import java.util.logging.Logger;
import javax.sql.DataSource;

/** A test DataSource defined by its {@link #getConnection()} alone. */
public abstract class ConnectionSource implements DataSource {

  /**
   * A DataSource with no database behind it: every connection is refused as a transient error, for
   * tests that build stores and executors without I/O.
   */
  public static ConnectionSource refusing() {
    return new ConnectionSource() {
      @Override
      public Connection getConnection() throws SQLException {
        throw new SQLTransientConnectionException("no database in this test", "08001");
      }
    };
  }

  /**
   * A DataSource that asks {@link DriverManager} for each connection to {@code url}, as Spring's
   * {@code DriverManagerDataSource} does.
   */
  public static ConnectionSource driverManager(String url) {
    return new ConnectionSource() {
      @Override
      public Connection getConnection() throws SQLException {
        return DriverManager.getConnection(url);
      }
    };
  }

  @Override
  public Connection getConnection(String username, String password) throws SQLException {
    return getConnection();
  }

  @Override
  public PrintWriter getLogWriter() {
    return new PrintWriter(System.err);
  }

  @Override
  public void setLogWriter(PrintWriter out) {}

  @Override
  public void setLoginTimeout(int seconds) {}

  @Override
  public int getLoginTimeout() {
    return 0;
  }

  @Override
  public Logger getParentLogger() throws SQLFeatureNotSupportedException {
    throw new SQLFeatureNotSupportedException();
  }

  @Override
  public <T> T unwrap(Class<T> iface) throws SQLException {
    throw new SQLException("not a wrapper");
  }

  @Override
  public boolean isWrapperFor(Class<?> iface) {
    return false;
  }
}
