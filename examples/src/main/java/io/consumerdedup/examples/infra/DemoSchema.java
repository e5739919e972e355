package io.consumerdedup.examples.infra;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.examples.ledger.Ledger;
import io.consumerdedup.jdbc.SqlDialect;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.sql.Statement;

/**
 * A fresh PostgreSQL schema (or MySQL/MariaDB database) for one run: the library's dedup table,
 * created from the schema file it ships for that database, and the demo's ledger tables. Dropped on
 * {@link #close()}.
 */
public final class DemoSchema implements AutoCloseable {
  /** The dedup table's DDL as the library ships it. */
  public static final String DEDUP_DDL_RESOURCE = SqlDialect.POSTGRESQL.schemaResource();

  private final String serverUrl;
  private final String name;
  private final HikariDataSource dataSource;

  private DemoSchema(String serverUrl, String name) {
    this.serverUrl = serverUrl;
    this.name = name;
    HikariConfig config = new HikariConfig();
    config.setJdbcUrl(url());
    config.setMaximumPoolSize(6);
    config.setPoolName(name);
    this.dataSource = new HikariDataSource(config);
  }

  /** Creates schema {@code name} (a lower-case identifier) with the dedup and ledger tables. */
  public static DemoSchema create(String serverUrl, String name) throws SQLException {
    if (!name.matches("[a-z_][a-z0-9_]{0,62}")) {
      throw new IllegalArgumentException("Not a schema name: '" + name + "'");
    }
    try (Connection connection = DriverManager.getConnection(serverUrl);
        Statement statement = connection.createStatement()) {
      if (isMySql(serverUrl)) {
        statement.execute("CREATE DATABASE " + name);
        statement.execute("USE " + name);
        statement.execute(dedupDdl(SqlDialect.MYSQL));
        for (String ddl : Ledger.MYSQL_DDL) {
          statement.execute(ddl);
        }
      } else {
        statement.execute("CREATE SCHEMA " + name);
        statement.execute("SET search_path TO " + name);
        statement.execute(dedupDdl(SqlDialect.POSTGRESQL));
        statement.execute(Ledger.DDL);
      }
    }
    return new DemoSchema(serverUrl, name);
  }

  public String name() {
    return name;
  }

  /** A JDBC URL whose connections use this schema (also for child JVMs). */
  public String url() {
    if (isMySql(serverUrl)) {
      // jdbc:mysql://host:port/database?params: the run's database in place of the server's.
      int hosts = serverUrl.indexOf("//") + 2;
      int query = serverUrl.indexOf('?');
      int end = query < 0 ? serverUrl.length() : query;
      int slash = serverUrl.indexOf('/', hosts);
      int path = slash < 0 || slash > end ? end : slash;
      return serverUrl.substring(0, path) + "/" + name + serverUrl.substring(end);
    }
    return serverUrl + (serverUrl.contains("?") ? "&" : "?") + "currentSchema=" + name;
  }

  /** Whether {@code jdbcUrl} names a MySQL or MariaDB server (either driver). */
  public static boolean isMySql(String jdbcUrl) {
    return jdbcUrl.startsWith("jdbc:mysql:") || jdbcUrl.startsWith("jdbc:mariadb:");
  }

  public HikariDataSource dataSource() {
    return dataSource;
  }

  @Override
  public void close() throws SQLException {
    dataSource.close();
    try (Connection connection = DriverManager.getConnection(serverUrl);
        Statement statement = connection.createStatement()) {
      statement.execute(
          isMySql(serverUrl) ? "DROP DATABASE " + name : "DROP SCHEMA " + name + " CASCADE");
    }
  }

  private static String dedupDdl(SqlDialect dialect) {
    String resource = dialect.schemaResource();
    try (InputStream in = DemoSchema.class.getClassLoader().getResourceAsStream(resource)) {
      if (in == null) {
        throw new IllegalStateException(resource + " is not on the class path");
      }
      return new String(in.readAllBytes(), StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new IllegalStateException("Could not read " + resource, e);
    }
  }
}
