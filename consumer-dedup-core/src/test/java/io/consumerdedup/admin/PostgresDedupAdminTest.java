package io.consumerdedup.admin;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.testing.TestDatabase;

/** {@link DedupAdminTests} on PostgreSQL. */
class PostgresDedupAdminTest extends DedupAdminTests {
  private String schema;

  @Override
  HikariDataSource createDataSource() {
    schema = TestDatabase.newSchema("admin");
    return TestDatabase.dataSource(schema, 4);
  }

  @Override
  void dropDatabase() {
    TestDatabase.dropSchema(schema);
  }

  @Override
  String expireLeaseSql() {
    return "UPDATE consumer_dedup SET lease_until = now() - interval '1 second'"
        + " WHERE biz_type = ? AND biz_key = ?";
  }

  @Override
  String schemaFile() {
    return "db/consumer-dedup/postgresql/V1__consumer_dedup.sql";
  }
}
