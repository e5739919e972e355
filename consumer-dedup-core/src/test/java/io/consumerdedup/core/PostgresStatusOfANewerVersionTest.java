package io.consumerdedup.core;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.testing.TestDatabase;

/** {@link StatusOfANewerVersionTests} on PostgreSQL. */
class PostgresStatusOfANewerVersionTest extends StatusOfANewerVersionTests {
  private String schema;

  @Override
  HikariDataSource createDataSource() {
    schema = TestDatabase.newSchema("newer_status");
    return TestDatabase.dataSource(schema, 4);
  }

  @Override
  void dropDatabase() {
    TestDatabase.dropSchema(schema);
  }
}
