package io.consumerdedup.testing;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.jdbc.SqlDialect;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Locale;
import java.util.UUID;
import org.junit.jupiter.api.Assumptions;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.testcontainers.DockerClientFactory;
import org.testcontainers.mysql.MySQLContainer;

/**
 * A real MariaDB (or MySQL) server for tests: the one named by {@code DEDUP_TEST_MARIADB_URL} if
 * set (CI), else the local server at 127.0.0.1:3306 if it answers; without either the tests are
 * skipped with a message that says how to run them. Each test class gets a database of its own
 * holding the table created from the one schema file, {@code
 * db/consumer-dedup/mysql/V1__consumer_dedup.sql}.
 *
 * <p>Both drivers are tested: the URL is given in either scheme and {@link Driver} rewrites it.
 */
public final class TestMariaDb {
  public static final String URL_VARIABLE = "DEDUP_TEST_MARIADB_URL";
  public static final String LOCAL_URL = "jdbc:mariadb://127.0.0.1:3306/test?user=root";
  public static final String SCHEMA_RESOURCE = SqlDialect.MYSQL.schemaResource();

  private static final Logger log = LoggerFactory.getLogger(TestMariaDb.class);
  private static volatile String baseUrl;
  private static volatile String unavailable;
  private static volatile String mysql8Url;

  /** The JDBC driver a test connects with. */
  public enum Driver {
    /** MariaDB Connector/J. */
    MARIADB("jdbc:mariadb:"),
    /** MySQL Connector/J. */
    MYSQL("jdbc:mysql:");

    final String scheme;

    Driver(String scheme) {
      this.scheme = scheme;
    }
  }

  private TestMariaDb() {}

  /**
   * The server's URL (its database {@code test}); skips the calling test when there is no server.
   */
  public static synchronized String baseUrl() {
    if (baseUrl == null && unavailable == null) {
      String configured = System.getenv(URL_VARIABLE);
      String url = configured != null && !configured.isBlank() ? configured : LOCAL_URL;
      try (Connection connection = DriverManager.getConnection(url)) {
        log.info(
            "Tests use the MariaDB/MySQL server {} ({})",
            connection.getMetaData().getDatabaseProductVersion(),
            configured != null && !configured.isBlank() ? URL_VARIABLE : "local default");
        baseUrl = url;
      } catch (SQLException e) {
        if (configured != null && !configured.isBlank()) {
          throw new IllegalStateException(URL_VARIABLE + " is set but does not answer: " + url, e);
        }
        unavailable =
            "No MariaDB/MySQL server: "
                + URL_VARIABLE
                + " is not set and "
                + LOCAL_URL
                + " does not answer ("
                + e.getMessage()
                + "); start one or set "
                + URL_VARIABLE
                + " to run these tests";
        log.warn(unavailable);
      }
    }
    Assumptions.assumeTrue(unavailable == null, unavailable);
    return baseUrl;
  }

  /**
   * A MySQL 8 server in a Testcontainers container, started once per JVM; skips the calling test
   * where Docker is not available.
   */
  public static synchronized String mysql8Url() {
    if (mysql8Url == null) {
      boolean docker;
      try {
        docker = DockerClientFactory.instance().isDockerAvailable();
      } catch (RuntimeException | LinkageError e) {
        docker = false;
      }
      Assumptions.assumeTrue(
          docker, "No Docker here: the MySQL 8 (Testcontainers) store tests are skipped");
      MySQLContainer container = new MySQLContainer("mysql:8.4");
      container.start();
      Runtime.getRuntime().addShutdownHook(new Thread(container::stop));
      mysql8Url =
          "jdbc:mysql://"
              + container.getHost()
              + ":"
              + container.getMappedPort(3306)
              + "/test?user=root&password="
              + container.getPassword();
    }
    return mysql8Url;
  }

  /** Creates a fresh database with the dedup table in it; returns its name. */
  public static String newDatabase(String prefix) {
    return newDatabase(baseUrl(), prefix);
  }

  /** Creates a fresh database on the server of {@code server} with the dedup table in it. */
  public static String newDatabase(String server, String prefix) {
    String database =
        ("dedup_" + prefix + "_" + UUID.randomUUID().toString().substring(0, 8))
            .toLowerCase(Locale.ROOT)
            .replaceAll("[^a-z0-9_]", "_");
    try (Connection connection = DriverManager.getConnection(server);
        Statement statement = connection.createStatement()) {
      statement.execute("CREATE DATABASE " + database);
      statement.execute("USE " + database);
      statement.execute(schemaDdl());
    } catch (SQLException e) {
      throw new IllegalStateException("Could not create test database " + database, e);
    }
    return database;
  }

  /** The DDL of the dedup table, exactly as shipped. */
  public static String schemaDdl() {
    try (InputStream in = TestMariaDb.class.getClassLoader().getResourceAsStream(SCHEMA_RESOURCE)) {
      if (in == null) {
        throw new IllegalStateException(SCHEMA_RESOURCE + " is not on the classpath");
      }
      return new String(in.readAllBytes(), StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }

  /** A JDBC URL on {@code database} for {@code driver}. */
  public static String url(String database, Driver driver) {
    return url(baseUrl(), database, driver);
  }

  /** A JDBC URL on {@code database} of the server of {@code server} for {@code driver}. */
  public static String url(String server, String database, Driver driver) {
    String base = server;
    String rest = base.substring(base.indexOf("//"));
    int slash = rest.indexOf('/', 2);
    int query = rest.indexOf('?');
    String hostPort = rest.substring(0, slash < 0 ? (query < 0 ? rest.length() : query) : slash);
    String params = query < 0 ? "" : rest.substring(query);
    return driver.scheme + hostPort + "/" + database + params;
  }

  /** A small pool on {@code database}. Close it when the test ends. */
  public static HikariDataSource dataSource(String database, Driver driver, int maxPoolSize) {
    return dataSource(baseUrl(), database, driver, maxPoolSize, null);
  }

  /** A small pool on {@code database} whose connections first run {@code initSql} if not null. */
  public static HikariDataSource dataSource(
      String server, String database, Driver driver, int maxPoolSize, String initSql) {
    HikariConfig config = new HikariConfig();
    if (initSql != null) {
      config.setConnectionInitSql(initSql);
    }
    config.setJdbcUrl(url(server, database, driver));
    config.setMaximumPoolSize(maxPoolSize);
    config.setPoolName("test-" + driver.name().toLowerCase(Locale.ROOT) + "-" + database);
    return new HikariDataSource(config);
  }

  /** A connection on {@code database}, outside any pool. */
  public static Connection connect(String database, Driver driver) throws SQLException {
    return DriverManager.getConnection(url(database, driver));
  }

  /** Drops a database made by {@link #newDatabase(String)}. */
  public static void dropDatabase(String database) {
    if (baseUrl != null) {
      dropDatabase(baseUrl, database);
    }
  }

  /** Drops a database made by {@link #newDatabase(String, String)}. */
  public static void dropDatabase(String server, String database) {
    try (Connection connection = DriverManager.getConnection(server);
        Statement statement = connection.createStatement()) {
      statement.execute("DROP DATABASE IF EXISTS " + database);
    } catch (SQLException e) {
      log.warn("Could not drop test database {}", database, e);
    }
  }
}
