package io.consumerdedup.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.testing.TestMariaDb;
import javax.sql.DataSource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;

class JanitorKeysetMariaDbTest extends JanitorKeysetTests {
  private String database;
  private HikariDataSource dataSource;
  private JdbcDedupStore store;

  @BeforeEach
  void setUp() {
    database = TestMariaDb.newDatabase("keyset");
    dataSource = TestMariaDb.dataSource(database, TestMariaDb.Driver.MARIADB, 4);
    store = JdbcDedupStore.builder(dataSource).build();
  }

  @AfterEach
  void tearDown() {
    dataSource.close();
    TestMariaDb.dropDatabase(database);
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
    return "UTC_TIMESTAMP(6) - INTERVAL " + seconds + " SECOND";
  }

  @Override
  String numbers(int count) {
    return "(SELECT seq AS n FROM seq_1_to_" + count + ") s";
  }

  @Override
  int unexpiredRowsOutlastingATinyTimeout() {
    return 200_000;
  }
}
