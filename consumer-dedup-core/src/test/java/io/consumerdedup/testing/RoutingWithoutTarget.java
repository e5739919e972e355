package io.consumerdedup.testing;

import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.function.BooleanSupplier;
import javax.sql.DataSource;

/**
 * What a Spring routing DataSource does without a target for the thread's lookup key: it throws a
 * {@code RuntimeException} where JDBC says {@code SQLException}.
 */
public final class RoutingWithoutTarget {
  /** What {@code AbstractRoutingDataSource} throws without a target for the thread's key. */
  public static final String REASON = "Cannot determine target DataSource for lookup key [null]";

  private RoutingWithoutTarget() {}

  /**
   * A routing DataSource over {@code target}, which has no target while {@code noTarget} says so.
   */
  public static ConnectionSource routing(DataSource target, BooleanSupplier noTarget) {
    return new ConnectionSource() {
      @Override
      public Connection getConnection() throws SQLException {
        if (noTarget.getAsBoolean()) {
          throw new IllegalStateException(REASON);
        }
        return target.getConnection();
      }
    };
  }

  /**
   * A {@code LazyConnectionDataSourceProxy} over such a routing DataSource: while {@code noTarget}
   * says so, it lends a {@link #lazyConnection()}.
   */
  public static ConnectionSource lazy(DataSource target, BooleanSupplier noTarget) {
    return new ConnectionSource() {
      @Override
      public Connection getConnection() throws SQLException {
        return noTarget.getAsBoolean() ? lazyConnection() : target.getConnection();
      }
    };
  }

  /**
   * What Spring's {@code LazyConnectionDataSourceProxy} lends when its routing target has no
   * DataSource for the thread: it answers the transaction's settings, commit and rollback itself,
   * and throws the routing's exception at every call that needs the target.
   */
  public static Connection lazyConnection() {
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
