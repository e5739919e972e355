package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.testing.TestDatabase;
import java.sql.Connection;
import java.sql.Statement;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Mode TRANSACTIONAL set up as docs/kafka-clients.md shows, {@code
 * JdbcDedupStore.builder(transactions)} over a {@link TransactionBoundDataSource}: the start-up
 * table check runs on a connection of the pool, outside any transaction, and fails start-up as in
 * mode SEPARATE.
 */
class TransactionalStartUpCheckTest {
  private String schema;
  private HikariDataSource pool;

  @BeforeEach
  void setUp() {
    schema = TestDatabase.newSchema("tx_startup");
    pool = TestDatabase.dataSource(schema, 2);
  }

  @AfterEach
  void tearDown() {
    pool.close();
    TestDatabase.dropSchema(schema);
  }

  @Test
  void aMissingTableFailsStartUp() throws Exception {
    try (Connection connection = pool.getConnection();
        Statement statement = connection.createStatement()) {
      statement.execute("DROP TABLE consumer_dedup");
    }
    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(pool);

    assertThatThrownBy(
            () ->
                IdempotentExecutor.builder(JdbcDedupStore.builder(transactions).build())
                    .mode(DedupMode.TRANSACTIONAL)
                    .build())
        .isInstanceOf(IllegalStateException.class)
        .hasMessageContaining("The dedup table consumer_dedup does not exist");
  }

  @Test
  void theStoresOwnCallsTakeAConnectionOfThePool() {
    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(pool);
    JdbcDedupStore store = JdbcDedupStore.builder(transactions).build();

    assertThat(store.missingColumns()).isEmpty();
    assertThat(store.find(DedupKey.of("payment", "none"))).isEmpty();
  }
}
