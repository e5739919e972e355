package io.consumerdedup.test.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.test.DedupStoreContract;
import io.consumerdedup.testing.TestPgBouncer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;

/**
 * The PostgreSQL store keeps the store contract through a real PgBouncer in transaction pool mode,
 * on the JDBC URL a user writes (DEDUP_TEST_PGBOUNCER_URL; skipped with a message without it,
 * failed under CI).
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class PgBouncerDedupStoreContractTest extends DedupStoreContract {
  private String schema;
  private HikariDataSource dataSource;
  private JdbcDedupStore store;

  @BeforeAll
  void setUp() {
    schema = TestPgBouncer.newSchema("contract_pgbouncer");
    dataSource = TestPgBouncer.dataSource(8);
    store = JdbcDedupStore.builder(dataSource).tableName(schema + ".consumer_dedup").build();
  }

  @AfterAll
  void tearDown() {
    if (dataSource != null) {
      dataSource.close();
      TestPgBouncer.dropSchema(schema);
    }
  }

  @Override
  protected DedupStore store() {
    return store;
  }
}
