package io.consumerdedup.admin;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.testing.TestPgBouncer;

/**
 * {@link DedupAdminTests} on PostgreSQL through a real PgBouncer in transaction pool mode, on the
 * JDBC URL a user writes.
 */
class PgBouncerDedupAdminTest extends DedupAdminTests {
  private String schema;

  @Override
  HikariDataSource createDataSource() {
    schema = TestPgBouncer.newSchema("admin_pgbouncer");
    return TestPgBouncer.dataSource(4);
  }

  @Override
  void dropDatabase() {
    TestPgBouncer.dropSchema(schema);
  }

  @Override
  String qualified(String table) {
    return schema + "." + table;
  }

  @Override
  String expireLeaseSql() {
    return "UPDATE "
        + qualified("consumer_dedup")
        + " SET lease_until = now() - interval '1 second' WHERE biz_type = ? AND biz_key = ?";
  }

  @Override
  String schemaFile() {
    return "db/consumer-dedup/postgresql/V1__consumer_dedup.sql";
  }
}
