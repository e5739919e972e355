package io.consumerdedup.testing;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.zonky.test.db.postgres.embedded.EmbeddedPostgres;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Locale;
import java.util.UUID;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.testcontainers.DockerClientFactory;
import org.testcontainers.postgresql.PostgreSQLContainer;

/**
 * A real PostgreSQL server for tests, chosen once per JVM: the server named by {@code
 * DEDUP_TEST_JDBC_URL} if set (CI), else a Testcontainers container if Docker is reachable, else an
 * embedded PostgreSQL (zonky). Each test gets its own schema holding the table created from the one
 * schema file, {@code db/consumer-dedup/postgresql/V1__consumer_dedup.sql}.
 */
public final class TestDatabase {
  public static final String URL_VARIABLE = "DEDUP_TEST_JDBC_URL";
  public static final String SCHEMA_RESOURCE = JdbcDedupStore.SCHEMA_RESOURCE;

  private static final Logger log = LoggerFactory.getLogger(TestDatabase.class);
  private static volatile String baseUrl;

  private TestDatabase() {}

  /** The JDBC URL of the server (no schema chosen), starting one if needed. */
  public static synchronized String baseUrl() {
    if (baseUrl == null) {
      baseUrl = resolve();
    }
    return baseUrl;
  }

  private static String resolve() {
    String configured = System.getenv(URL_VARIABLE);
    if (configured != null && !configured.isBlank()) {
      log.info("Tests use the PostgreSQL server of {}", URL_VARIABLE);
      return configured;
    }
    if (dockerAvailable()) {
      PostgreSQLContainer container = new PostgreSQLContainer("postgres:16-alpine");
      container.start();
      Runtime.getRuntime().addShutdownHook(new Thread(container::stop));
      log.info("Tests use a Testcontainers PostgreSQL");
      return container.getJdbcUrl()
          + "&user="
          + container.getUsername()
          + "&password="
          + container.getPassword();
    }
    try {
      EmbeddedPostgres embedded = EmbeddedPostgres.builder().start();
      Runtime.getRuntime()
          .addShutdownHook(
              new Thread(
                  () -> {
                    try {
                      embedded.close();
                    } catch (IOException e) {
                      log.warn("Could not stop the embedded PostgreSQL", e);
                    }
                  }));
      log.info("Tests use an embedded PostgreSQL (no {} and no Docker)", URL_VARIABLE);
      return embedded.getJdbcUrl("postgres", "postgres");
    } catch (IOException e) {
      throw new IllegalStateException("Could not start an embedded PostgreSQL", e);
    }
  }

  private static boolean dockerAvailable() {
    try {
      return DockerClientFactory.instance().isDockerAvailable();
    } catch (RuntimeException | LinkageError e) {
      return false;
    }
  }

  /** Creates a fresh schema with the dedup table in it; returns its name. */
  public static String newSchema(String prefix) {
    String schema =
        (prefix + "_" + UUID.randomUUID().toString().substring(0, 8))
            .toLowerCase(Locale.ROOT)
            .replaceAll("[^a-z0-9_]", "_");
    try (Connection connection = DriverManager.getConnection(baseUrl());
        Statement statement = connection.createStatement()) {
      statement.execute("CREATE SCHEMA " + schema);
      statement.execute("SET search_path TO " + schema);
      statement.execute(schemaDdl());
    } catch (SQLException e) {
      throw new IllegalStateException("Could not create test schema " + schema, e);
    }
    return schema;
  }

  /** The DDL of the dedup table, exactly as shipped. */
  public static String schemaDdl() {
    try (InputStream in =
        TestDatabase.class.getClassLoader().getResourceAsStream(SCHEMA_RESOURCE)) {
      if (in == null) {
        throw new IllegalStateException(SCHEMA_RESOURCE + " is not on the classpath");
      }
      return new String(in.readAllBytes(), StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }

  /**
   * A JDBC URL whose connections use {@code schema} (for child JVMs and plain DriverManager use).
   */
  public static String url(String schema) {
    String base = baseUrl();
    return base + (base.contains("?") ? "&" : "?") + "currentSchema=" + schema;
  }

  /** A small pool on {@code schema}. Close it when the test ends. */
  public static HikariDataSource dataSource(String schema, int maxPoolSize) {
    HikariConfig config = new HikariConfig();
    config.setJdbcUrl(url(schema));
    config.setMaximumPoolSize(maxPoolSize);
    config.setPoolName("test-" + schema);
    return new HikariDataSource(config);
  }

  /** A connection on {@code schema}, outside any pool. */
  public static Connection connect(String schema) throws SQLException {
    return DriverManager.getConnection(url(schema));
  }

  /** Drops a schema made by {@link #newSchema(String)}. */
  public static void dropSchema(String schema) {
    try (Connection connection = DriverManager.getConnection(baseUrl());
        Statement statement = connection.createStatement()) {
      statement.execute("DROP SCHEMA IF EXISTS " + schema + " CASCADE");
    } catch (SQLException e) {
      log.warn("Could not drop test schema {}", schema, e);
    }
  }
}
