package io.consumerdedup.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.testing.TestDatabase;
import io.consumerdedup.testing.TestMariaDb;
import javax.sql.DataSource;
import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * A PostgreSQL schema and a MariaDB database of their own for a test class that runs its tests on
 * both, registered as a static {@code @RegisterExtension}; parameterised tests name the database
 * {@code "postgres"} or {@code "mariadb"}, or {@code "mysql"}: the MariaDB database through MySQL
 * Connector/J, whose pool is opened when first asked for.
 */
final class TwoDatabases implements BeforeAllCallback, AfterAllCallback {
  private final String prefix;
  private String schema;
  private String mariaDatabase;
  private HikariDataSource postgres;
  private HikariDataSource mariaDb;
  private HikariDataSource mySqlDriver;

  TwoDatabases(String prefix) {
    this.prefix = prefix;
  }

  @Override
  public void beforeAll(ExtensionContext context) {
    schema = TestDatabase.newSchema(prefix);
    postgres = TestDatabase.dataSource(schema, 4);
    mariaDatabase = TestMariaDb.newDatabase(prefix);
    mariaDb = TestMariaDb.dataSource(mariaDatabase, TestMariaDb.Driver.MARIADB, 4);
  }

  @Override
  public void afterAll(ExtensionContext context) {
    postgres.close();
    TestDatabase.dropSchema(schema);
    mariaDb.close();
    if (mySqlDriver != null) {
      mySqlDriver.close();
    }
    TestMariaDb.dropDatabase(mariaDatabase);
  }

  DataSource postgres() {
    return postgres;
  }

  DataSource mariaDb() {
    return mariaDb;
  }

  /** The MariaDB database through MySQL Connector/J. */
  synchronized DataSource mySqlDriver() {
    if (mySqlDriver == null) {
      mySqlDriver = TestMariaDb.dataSource(mariaDatabase, TestMariaDb.Driver.MYSQL, 4);
    }
    return mySqlDriver;
  }

  /** The data source of {@code "postgres"} or {@code "mysql"}, else MariaDB's. */
  DataSource dataSource(String database) {
    return switch (database) {
      case "postgres" -> postgres;
      case "mysql" -> mySqlDriver();
      default -> mariaDb;
    };
  }
}
