package io.consumerdedup.spring;

import com.zaxxer.hikari.HikariDataSource;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;
import org.springframework.jdbc.datasource.DelegatingDataSource;

/**
 * The application's DataSource, counting the dedup statements the store prepares (each is executed
 * once, a group's releases as one batch): claims (the upsert of the claim), SUCCESS marks, and
 * releases of claims whose listener never ran (a batch for the keys the claims created, and one for
 * re-claims). Statements are told apart by their SQL, as the PostgreSQL dialect writes it.
 */
final class StatementCounter extends DelegatingDataSource {
  final AtomicInteger claims = new AtomicInteger();
  final AtomicInteger marks = new AtomicInteger();
  final AtomicInteger releases = new AtomicInteger();

  private StatementCounter(DataSource target) {
    super(target);
  }

  /** A pool of six connections to {@code url}, counted. */
  static StatementCounter pool(String url) {
    HikariDataSource pool = new HikariDataSource();
    pool.setJdbcUrl(url);
    pool.setMaximumPoolSize(6);
    return new StatementCounter(pool);
  }

  /** A snapshot, to count what happens from now on. */
  Counts now() {
    return new Counts(claims.get(), marks.get(), releases.get());
  }

  /** Statement counts at one moment. */
  record Counts(int claims, int marks, int releases) {
    Counts since(Counts earlier) {
      return new Counts(
          claims - earlier.claims, marks - earlier.marks, releases - earlier.releases);
    }
  }

  @Override
  public Connection getConnection() throws SQLException {
    return counted(super.getConnection());
  }

  @Override
  public Connection getConnection(String username, String password) throws SQLException {
    return counted(super.getConnection(username, password));
  }

  private Connection counted(Connection connection) {
    InvocationHandler handler =
        (proxy, method, args) -> {
          if (method.getName().equals("prepareStatement")
              && args != null
              && args[0] instanceof String sql) {
            count(sql);
          }
          try {
            return method.invoke(connection, args);
          } catch (InvocationTargetException e) {
            throw e.getCause();
          }
        };
    return (Connection)
        Proxy.newProxyInstance(
            StatementCounter.class.getClassLoader(), new Class<?>[] {Connection.class}, handler);
  }

  private void count(String sql) {
    if (sql.contains("claimed AS (INSERT INTO")) {
      claims.incrementAndGet(); // a claim, perhaps carrying earlier SUCCESS marks
    } else if (sql.contains("status = 'SUCCESS'") || sql.contains("r.biz_key, 'SUCCESS'")) {
      marks.incrementAndGet(); // one key's UPDATE, or a group's INSERT ... ON CONFLICT DO UPDATE
    }
    if (sql.contains("d.claim_id = ?")) {
      releases.incrementAndGet(); // a group's releases: one batch of deletes, one of restores
    }
  }

  void close() {
    if (getTargetDataSource() instanceof HikariDataSource pool) {
      pool.close();
    }
  }
}
