package io.consumerdedup.testing;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.SQLException;

/**
 * Hands out the connection of the caller's open transaction, whose {@code close()} does nothing:
 * what Spring's {@code TransactionAwareDataSourceProxy} does, without Spring, for testing
 * transactional mode in the core.
 */
public final class BoundConnectionDataSource extends ConnectionSource {
  private final ThreadLocal<Connection> bound = new ThreadLocal<>();

  /** Binds {@code connection} to the current thread until {@link #unbind()}. */
  public void bind(Connection connection) {
    bound.set(connection);
  }

  public void unbind() {
    bound.remove();
  }

  @Override
  public Connection getConnection() throws SQLException {
    Connection connection = bound.get();
    if (connection == null) {
      throw new SQLException("No connection bound to this thread");
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
}
