package io.consumerdedup.examples.infra;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.examples.ledger.Ledger;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.sql.Statement;

/**
 * A fresh PostgreSQL schema for one run: the library's dedup table, created from the schema file it
 * ships, and the demo's ledger tables. Dropped on {@link #close()}.
 */
public final class DemoSchema implements AutoCloseable {
  /** The dedup table's DDL as the library ships it. */
  public static final String DEDUP_DDL_RESOURCE =
      "db/consumer-dedup/postgresql/V1__consumer_dedup.sql";

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
      statement.execute("CREATE SCHEMA " + name);
      statement.execute("SET search_path TO " + name);
      statement.execute(dedupDdl());
      statement.execute(Ledger.DDL);
    }
    return new DemoSchema(serverUrl, name);
  }

  public String name() {
    return name;
  }

  /** A JDBC URL whose connections use this schema (also for child JVMs). */
  public String url() {
    return serverUrl + (serverUrl.contains("?") ? "&" : "?") + "currentSchema=" + name;
  }

  public HikariDataSource dataSource() {
    return dataSource;
  }

  @Override
  public void close() throws SQLException {
    dataSource.close();
    try (Connection connection = DriverManager.getConnection(serverUrl);
        Statement statement = connection.createStatement()) {
      statement.execute("DROP SCHEMA " + name + " CASCADE");
    }
  }

  private static String dedupDdl() {
    try (InputStream in =
        DemoSchema.class.getClassLoader().getResourceAsStream(DEDUP_DDL_RESOURCE)) {
      if (in == null) {
        throw new IllegalStateException(DEDUP_DDL_RESOURCE + " is not on the class path");
      }
      return new String(in.readAllBytes(), StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new IllegalStateException("Could not read " + DEDUP_DDL_RESOURCE, e);
    }
  }
}
