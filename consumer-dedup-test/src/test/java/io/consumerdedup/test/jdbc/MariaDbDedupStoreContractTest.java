package io.consumerdedup.test.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.test.DedupStoreContract;
import io.consumerdedup.testing.TestMariaDb;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;

/**
 * The MySQL/MariaDB dialect keeps the same store contract as PostgreSQL, on the local MariaDB
 * through MariaDB Connector/J, and through MySQL Connector/J in a subclass (skipped with a message
 * where no server answers; CI starts one).
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class MariaDbDedupStoreContractTest extends DedupStoreContract {
  /** The driver the store connects with. */
  TestMariaDb.Driver driver() {
    return TestMariaDb.Driver.MARIADB;
  }

  private String database;
  private HikariDataSource dataSource;
  private JdbcDedupStore store;

  @BeforeAll
  void setUp() {
    database =
        TestMariaDb.newDatabase("contract_" + driver().name().toLowerCase(java.util.Locale.ROOT));
    dataSource = TestMariaDb.dataSource(database, driver(), 8);
    store = JdbcDedupStore.builder(dataSource).build();
  }

  @AfterAll
  void tearDown() {
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
