package io.consumerdedup.test.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.test.DedupStoreContract;
import io.consumerdedup.testing.TestMariaDb;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;

/**
 * The MySQL/MariaDB dialect keeps the same store contract as PostgreSQL, on the local MariaDB
 * through MariaDB Connector/J (skipped with a message where no server answers; CI starts one).
 */
class MariaDbDedupStoreContractTest extends DedupStoreContract {
  private static String database;
  private static HikariDataSource dataSource;
  private static JdbcDedupStore store;

  @BeforeAll
  static void setUp() {
    database = TestMariaDb.newDatabase("contract");
    dataSource = TestMariaDb.dataSource(database, TestMariaDb.Driver.MARIADB, 8);
    store = JdbcDedupStore.builder(dataSource).build();
  }

  @AfterAll
  static void tearDown() {
    if (dataSource != null) {
      dataSource.close();
      TestMariaDb.dropDatabase(database);
    }
  }

  @Override
  protected DedupStore store() {
    return store;
  }
}
