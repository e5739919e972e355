package io.consumerdedup.testing;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

/**
 * A pooled DataSource on a test schema whose connections run through a {@link TcpProxy}, so faults
 * are real network faults, aimed at one statement or one connection:
 *
 * <ul>
 *   <li>{@link #loseReplyOnce(String)}: the next statement whose SQL contains a fragment reaches
 *       the server and commits, and its reply is lost (the connection is reset): the client sees a
 *       connection error for work that was done;
 *   <li>{@link #loseCommitReplyOnce()}: the same for the next {@code Connection.commit()};
 *   <li>{@link #hangNextConnection()}: the next connection handed out stops answering without being
 *       reset, as a connection does after a failover leaves it half-open;
 *   <li>{@link #timeOutEvery(String, String)}: every statement whose SQL contains a fragment waits
 *       on a table lock until its query timeout has the server cancel it;
 *   <li>{@link #proxy()}: the proxy itself, to refuse connections, cut them or add latency.
 * </ul>
 *
 * Counters tell a test that its fault really happened.
 */
public final class FaultyDataSource extends ConnectionSource implements AutoCloseable {
  /**
   * One connection per attempt (no second try without SSL), and a cancel request that gives up
   * after a second: over a dead network pgjdbc waits that long for the cancel of a timed-out
   * statement before it returns.
   */
  private static final String DRIVER_SETTINGS = "&sslmode=disable&cancelSignalTimeout=1";

  private final String schema;
  private final TcpProxy proxy;
  private final HikariDataSource pool;
  private final AtomicReference<String> loseReplyOf = new AtomicReference<>();
  private final AtomicBoolean loseCommitReply = new AtomicBoolean();
  private final AtomicInteger repliesLost = new AtomicInteger();
  private final AtomicInteger hangNext = new AtomicInteger();
  private final AtomicInteger hungConnections = new AtomicInteger();
  private final AtomicReference<TimeOut> timeOut = new AtomicReference<>();
  private final AtomicInteger statementsTimedOut = new AtomicInteger();
  private final List<TcpProxy> halfOpenProxies = new CopyOnWriteArrayList<>();

  private FaultyDataSource(String schema, int poolSize, Duration connectionTimeout) {
    this.schema = schema;
    this.proxy = TcpProxy.forPostgres();
    HikariConfig config = new HikariConfig();
    config.setJdbcUrl(proxy.rewrite(TestDatabase.url(schema)) + DRIVER_SETTINGS);
    config.setMaximumPoolSize(poolSize);
    config.setConnectionTimeout(connectionTimeout.toMillis());
    // Fail fast when the proxy refuses, instead of retrying the first connection.
    config.setInitializationFailTimeout(-1);
    // A fault that cuts HikariCP's first read of the default isolation would leave it at -1 and
    // break every later connection (HikariCP issue 1944); naming PostgreSQL's default avoids it.
    config.setTransactionIsolation("TRANSACTION_READ_COMMITTED");
    config.setPoolName("faulty-" + schema);
    this.pool = new HikariDataSource(config);
  }

  /** A pool of {@code poolSize} on {@code schema}, waiting at most {@code connectionTimeout}. */
  public static FaultyDataSource on(String schema, int poolSize, Duration connectionTimeout) {
    return new FaultyDataSource(schema, poolSize, connectionTimeout);
  }

  public TcpProxy proxy() {
    return proxy;
  }

  /**
   * Arms a one-shot fault: the next statement whose SQL contains {@code sqlFragment} is executed
   * and committed by the server, and its reply is lost.
   */
  public void loseReplyOnce(String sqlFragment) {
    loseReplyOf.set(sqlFragment);
  }

  /**
   * Arms a one-shot fault: the next {@code commit()} of a connection handed out by this DataSource,
   * or the next {@code COMMIT} it runs as a statement, commits on the server, and its reply is
   * lost.
   */
  public void loseCommitReplyOnce() {
    loseCommitReply.set(true);
  }

  /**
   * How many replies were lost to {@link #loseReplyOnce(String)} and {@link
   * #loseCommitReplyOnce()}.
   */
  public int repliesLost() {
    return repliesLost.get();
  }

  /** Arms a one-shot fault: the next connection handed out is half-open (never answers). */
  public void hangNextConnection() {
    hangNext.incrementAndGet();
  }

  /** How many half-open connections were handed out. */
  public int hungConnections() {
    return hungConnections.get();
  }

  /**
   * Arms a lasting fault: each statement whose SQL contains {@code sqlFragment} runs while another
   * transaction holds {@code table} locked, so it waits until its query timeout has the server
   * cancel it (SQL state 57014). Other statements run as usual. {@link #stopTimingOut()} disarms
   * it.
   */
  public void timeOutEvery(String sqlFragment, String table) {
    timeOut.set(new TimeOut(sqlFragment, table));
  }

  /** Disarms {@link #timeOutEvery(String, String)}. */
  public void stopTimingOut() {
    timeOut.set(null);
  }

  private record TimeOut(String sqlFragment, String table) {}

  /** How many statements were cancelled by {@link #timeOutEvery(String, String)}. */
  public int statementsTimedOut() {
    return statementsTimedOut.get();
  }

  @Override
  public Connection getConnection() throws SQLException {
    if (hangNext.getAndUpdate(n -> Math.max(0, n - 1)) > 0) {
      return halfOpenConnection();
    }
    return watched(pool.getConnection());
  }

  /**
   * A connection of its own, made through a proxy of its own that blackholes once the connection is
   * up. The proxy is left running: closing it would reset the connection.
   */
  private Connection halfOpenConnection() throws SQLException {
    TcpProxy own = TcpProxy.forPostgres();
    Connection connection =
        DriverManager.getConnection(own.rewrite(TestDatabase.url(schema)) + DRIVER_SETTINGS);
    own.blackhole();
    halfOpenProxies.add(own);
    hungConnections.incrementAndGet();
    return connection;
  }

  private Connection watched(Connection connection) {
    InvocationHandler handler =
        (self, method, args) -> {
          if (method.getName().equals("commit") && loseCommitReply.compareAndSet(true, false)) {
            return invokeLosingReply(connection, method, args);
          }
          Object result = invoke(connection, method, args);
          if (method.getName().equals("prepareStatement") && args != null && args.length >= 1) {
            return watchedStatement((PreparedStatement) result, (String) args[0]);
          }
          return result;
        };
    return (Connection)
        Proxy.newProxyInstance(
            getClass().getClassLoader(), new Class<?>[] {Connection.class}, handler);
  }

  private PreparedStatement watchedStatement(PreparedStatement statement, String sql) {
    InvocationHandler handler =
        (self, method, args) -> {
          if (method.getName().startsWith("execute")) {
            // The store sends the COMMIT of its own transactions on PostgreSQL as a statement, so
            // that its statement timeout applies.
            if (sql.strip().endsWith("COMMIT") && loseCommitReply.compareAndSet(true, false)) {
              return invokeLosingReply(statement, method, args);
            }
            String fragment = loseReplyOf.get();
            if (fragment != null
                && sql.contains(fragment)
                && loseReplyOf.compareAndSet(fragment, null)) {
              return invokeLosingReply(statement, method, args);
            }
            TimeOut armed = timeOut.get();
            if (armed != null && sql.contains(armed.sqlFragment())) {
              return invokeWhileLocked(armed.table(), statement, method, args);
            }
          }
          return invoke(statement, method, args);
        };
    return (PreparedStatement)
        Proxy.newProxyInstance(
            getClass().getClassLoader(), new Class<?>[] {PreparedStatement.class}, handler);
  }

  /** Invokes the call with the proxy armed to lose its reply, counting the reply if it was lost. */
  private Object invokeLosingReply(Object target, Method method, Object[] args) throws Throwable {
    int before = proxy.repliesDropped();
    proxy.dropNextReplyAndCut();
    try {
      return invoke(target, method, args);
    } finally {
      if (proxy.repliesDropped() > before) {
        repliesLost.incrementAndGet();
      }
    }
  }

  /** Invokes the call while a transaction of its own holds {@code table} exclusively. */
  private Object invokeWhileLocked(String table, Object target, Method method, Object[] args)
      throws Throwable {
    try (Connection locker = TestDatabase.connect(schema);
        Statement lock = locker.createStatement()) {
      locker.setAutoCommit(false);
      lock.execute("LOCK TABLE " + table + " IN ACCESS EXCLUSIVE MODE");
      try {
        return invoke(target, method, args);
      } catch (SQLException e) {
        if ("57014".equals(e.getSQLState())) {
          statementsTimedOut.incrementAndGet();
        }
        throw e;
      } finally {
        locker.rollback();
      }
    }
  }

  private static Object invoke(Object target, Method method, Object[] args) throws Throwable {
    try {
      return method.invoke(target, args);
    } catch (InvocationTargetException e) {
      throw e.getCause();
    }
  }

  @Override
  public void close() {
    pool.close();
    proxy.close();
    halfOpenProxies.forEach(TcpProxy::close);
  }
}
