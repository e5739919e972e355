package io.consumerdedup.bench;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.testing.TestDatabase;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.sql.DataSource;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * A PostgreSQL database of the benchmark's own, {@code bench_<random>}, created on the server the
 * tests use and dropped on {@link #close()}. A database rather than a schema because PostgreSQL
 * counts commits per database ({@code pg_stat_database.xact_commit}): other builds using the same
 * server do not blur the benchmark's counts. It holds the dedup table from the shipped schema file;
 * the variants add the tables of the peers. A run stopped by a signal drops it too, from a shutdown
 * hook.
 */
public final class BenchDatabase implements AutoCloseable {
  /** {@code jdbc:postgresql://host:port/} + database + {@code ?parameters}. */
  private static final Pattern JDBC_URL =
      Pattern.compile("(jdbc:postgresql://[^/?]*/)([^?]*)(\\?.*)?");

  private static final long QUIESCE_TIMEOUT_MILLIS = 30_000;

  private final String name;
  private final String url;
  private final Connection server;
  private final Thread dropOnExit;

  private BenchDatabase(String name, String url, String serverUrl, Connection server) {
    this.name = name;
    this.url = url;
    this.server = server;
    // An interrupted run (Ctrl-C, a kill) would leave the database behind.
    this.dropOnExit = new Thread(() -> dropQuietly(serverUrl, name), "bench-drop-" + name);
    Runtime.getRuntime().addShutdownHook(dropOnExit);
  }

  /**
   * Creates a database on the server of {@code serverUrl} (a PostgreSQL JDBC URL with credentials,
   * whose user may create databases) and the dedup table in it.
   */
  public static BenchDatabase create(String serverUrl) throws SQLException {
    Matcher matcher = JDBC_URL.matcher(serverUrl);
    if (!matcher.matches()) {
      throw new IllegalArgumentException(
          "Not a jdbc:postgresql://host:port/database URL: " + withoutParameters(serverUrl));
    }
    String name = "bench_" + HexFormat.of().toHexDigits(ThreadLocalRandom.current().nextInt());
    String parameters = matcher.group(3) == null ? "" : matcher.group(3);
    Connection server = DriverManager.getConnection(serverUrl);
    try (Statement statement = server.createStatement()) {
      statement.execute("CREATE DATABASE " + name);
    } catch (SQLException e) {
      server.close();
      throw new SQLException(
          "Could not create the benchmark's database "
              + name
              + " (the user needs the CREATEDB privilege)",
          e);
    }
    BenchDatabase database =
        new BenchDatabase(name, matcher.group(1) + name + parameters, serverUrl, server);
    database.execute(TestDatabase.schemaDdl());
    return database;
  }

  /** The database's name. */
  public String name() {
    return name;
  }

  /**
   * The server's version and the settings that decide what a commit costs, such as {@code 15.20
   * (Debian 15.20-0+deb12u1), fsync=on, synchronous_commit=on}.
   */
  public String describeServer() throws SQLException {
    try (Statement statement = server.createStatement();
        ResultSet result =
            statement.executeQuery(
                "SELECT current_setting('server_version'), current_setting('fsync'),"
                    + " current_setting('synchronous_commit')")) {
      result.next();
      return result.getString(1)
          + ", fsync="
          + result.getString(2)
          + ", synchronous_commit="
          + result.getString(3);
    }
  }

  /** The JDBC URL of the benchmark's database, for a child JVM. */
  public String url() {
    return url;
  }

  /**
   * A HikariCP pool on the database whose sessions carry {@code applicationName}. Close it when
   * done: the commit count waits for its sessions to end.
   */
  public HikariDataSource openPool(String applicationName, int maxPoolSize) {
    HikariConfig config = new HikariConfig();
    config.setJdbcUrl(url);
    config.setMaximumPoolSize(maxPoolSize);
    config.setPoolName(applicationName);
    config.addDataSourceProperty("ApplicationName", applicationName);
    return new HikariDataSource(config);
  }

  /** A data source without a pool, for set-up scripts. */
  public DataSource unpooledDataSource() {
    PGSimpleDataSource dataSource = new PGSimpleDataSource();
    dataSource.setURL(url);
    return dataSource;
  }

  /** Runs {@code sql} (one statement or a script without parameters) on a connection of its own. */
  public void execute(String sql) throws SQLException {
    try (Connection connection = DriverManager.getConnection(url);
        Statement statement = connection.createStatement()) {
      statement.execute(sql);
    }
  }

  /** Runs {@code sql} with {@code parameters} and returns the number of rows it changed. */
  public long update(String sql, Object... parameters) throws SQLException {
    try (Connection connection = DriverManager.getConnection(url);
        PreparedStatement statement = prepare(connection, sql, parameters)) {
      return statement.executeLargeUpdate();
    }
  }

  /** Runs a query for a single number. */
  public long queryForLong(String sql, Object... parameters) throws SQLException {
    try (Connection connection = DriverManager.getConnection(url);
        PreparedStatement statement = prepare(connection, sql, parameters);
        ResultSet result = statement.executeQuery()) {
      result.next();
      return result.getLong(1);
    }
  }

  /** Runs a query for a column of numbers. */
  public List<Long> queryForLongs(String sql, Object... parameters) throws SQLException {
    try (Connection connection = DriverManager.getConnection(url);
        PreparedStatement statement = prepare(connection, sql, parameters);
        ResultSet result = statement.executeQuery()) {
      List<Long> values = new ArrayList<>();
      while (result.next()) {
        values.add(result.getLong(1));
      }
      return values;
    }
  }

  private static PreparedStatement prepare(Connection connection, String sql, Object... parameters)
      throws SQLException {
    PreparedStatement statement = connection.prepareStatement(sql);
    for (int i = 0; i < parameters.length; i++) {
      statement.setObject(i + 1, parameters[i]);
    }
    return statement;
  }

  /**
   * The transactions committed in the database so far ({@code pg_stat_database.xact_commit}), read
   * once every client session on it has ended, so that their counts have been flushed to the
   * statistics. Close every pool on the database before calling it.
   *
   * @throws IllegalStateException if sessions are still open after 30 s
   */
  public long committedTransactions() throws SQLException, InterruptedException {
    long deadline = System.currentTimeMillis() + QUIESCE_TIMEOUT_MILLIS;
    while (serverLong(
            "SELECT count(*) FROM pg_stat_activity"
                + " WHERE datname = ? AND backend_type = 'client backend'")
        > 0) {
      if (System.currentTimeMillis() > deadline) {
        throw new IllegalStateException("Sessions on " + name + " are still open; close them");
      }
      Thread.sleep(20);
    }
    // A session ends after it flushed its counts, but older servers send them asynchronously.
    long previous = commitCounter();
    while (System.currentTimeMillis() < deadline) {
      Thread.sleep(100);
      long current = commitCounter();
      if (current == previous) {
        return current;
      }
      previous = current;
    }
    return previous;
  }

  private long commitCounter() throws SQLException {
    return serverLong("SELECT xact_commit FROM pg_stat_database WHERE datname = ?");
  }

  private long serverLong(String sql) throws SQLException {
    try (PreparedStatement statement = server.prepareStatement(sql)) {
      statement.setString(1, name);
      try (ResultSet result = statement.executeQuery()) {
        result.next();
        return result.getLong(1);
      }
    }
  }

  /** The updates of {@code table} so far, and how many of them were HOT updates. */
  public TableActivity tableActivity(String table) throws SQLException {
    try (Connection connection = DriverManager.getConnection(url);
        PreparedStatement statement =
            connection.prepareStatement(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = ?")) {
      statement.setString(1, table);
      try (ResultSet result = statement.executeQuery()) {
        return result.next()
            ? new TableActivity(result.getLong(1), result.getLong(2))
            : new TableActivity(0, 0);
      }
    }
  }

  /** The bytes {@code table} takes on disk: in all (heap, TOAST, indexes) and in its indexes. */
  public RelationSize relationSize(String table) throws SQLException {
    try (Connection connection = DriverManager.getConnection(url);
        PreparedStatement statement =
            connection.prepareStatement(
                "SELECT pg_total_relation_size(c.oid), pg_indexes_size(c.oid)"
                    + " FROM pg_class c WHERE c.relname = ? AND c.relkind = 'r'")) {
      statement.setString(1, table);
      try (ResultSet result = statement.executeQuery()) {
        if (!result.next()) {
          throw new IllegalStateException("No table " + table + " in " + name);
        }
        return new RelationSize(result.getLong(1), result.getLong(2));
      }
    }
  }

  /** Drops the database, ending any session still on it. */
  @Override
  public void close() throws SQLException {
    try (Statement statement = server.createStatement()) {
      statement.execute(dropStatement(name));
    } finally {
      server.close();
      Runtime.getRuntime().removeShutdownHook(dropOnExit);
    }
  }

  private static String dropStatement(String name) {
    return "DROP DATABASE IF EXISTS " + name + " WITH (FORCE)";
  }

  private static void dropQuietly(String serverUrl, String name) {
    try (Connection connection = DriverManager.getConnection(serverUrl);
        Statement statement = connection.createStatement()) {
      statement.execute(dropStatement(name));
    } catch (SQLException e) {
      System.err.println("Could not drop the benchmark's database " + name + ": " + e);
    }
  }

  private static String withoutParameters(String url) {
    int query = url.indexOf('?');
    return query < 0 ? url : url.substring(0, query);
  }

  /**
   * Row updates of a table, from {@code pg_stat_user_tables}.
   *
   * @param updates {@code n_tup_upd}
   * @param hotUpdates {@code n_tup_hot_upd}: updates that touched no index
   */
  public record TableActivity(long updates, long hotUpdates) {
    /** The updates since {@code earlier}. */
    public TableActivity since(TableActivity earlier) {
      return new TableActivity(updates - earlier.updates, hotUpdates - earlier.hotUpdates);
    }

    /** The same counts added to {@code other}'s. */
    public TableActivity plus(TableActivity other) {
      return new TableActivity(updates + other.updates, hotUpdates + other.hotUpdates);
    }
  }

  /**
   * Disk use of a table.
   *
   * @param totalBytes heap, TOAST and indexes ({@code pg_total_relation_size})
   * @param indexBytes indexes alone ({@code pg_indexes_size})
   */
  public record RelationSize(long totalBytes, long indexBytes) {}
}
