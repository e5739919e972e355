package io.consumerdedup.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.testing.TestDatabase;
import javax.sql.DataSource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;

class JanitorKeysetPostgresTest extends JanitorKeysetTests {
  private String schema;
  private HikariDataSource dataSource;
  private JdbcDedupStore store;

  @BeforeEach
  void setUp() {
    schema = TestDatabase.newSchema("keyset");
    dataSource = TestDatabase.dataSource(schema, 4);
    store = JdbcDedupStore.builder(dataSource).build();
  }

  @AfterEach
  void tearDown() {
    dataSource.close();
    TestDatabase.dropSchema(schema);
  }

  @Override
  DataSource dataSource() {
    return dataSource;
  }

  @Override
  JdbcDedupStore store() {
    return store;
  }

  @Override
  String ago(long seconds) {
    return "now() - make_interval(secs => " + seconds + ")";
  }

  @Override
  String numbers(int count) {
    return "generate_series(1, " + count + ") AS s(n)";
  }

  @Override
  int unexpiredRowsOutlastingATinyTimeout() {
    return 300_000;
  }
}
