package io.consumerdedup.test.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.test.DedupStoreContract;
import io.consumerdedup.testing.TestDatabase;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;

/**
 * The PostgreSQL store keeps the store contract, on a real server and its clock (the leases of the
 * contract's expiry tests are waited out). In a package of its own, as a store of yours would be:
 * the contract's tests run from there too.
 */
class JdbcDedupStoreContractTest extends DedupStoreContract {
  private static String schema;
  private static HikariDataSource dataSource;
  private static JdbcDedupStore store;

  @BeforeAll
  static void setUp() {
    schema = TestDatabase.newSchema("contract");
    dataSource = TestDatabase.dataSource(schema, 8);
    store = JdbcDedupStore.builder(dataSource).build();
  }

  @AfterAll
  static void tearDown() {
    dataSource.close();
    TestDatabase.dropSchema(schema);
  }

  @Override
  protected DedupStore store() {
    return store;
  }
}
