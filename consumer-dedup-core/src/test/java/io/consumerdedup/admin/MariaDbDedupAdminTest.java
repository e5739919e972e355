package io.consumerdedup.admin;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.testing.TestMariaDb;

/** {@link DedupAdminTests} on MariaDB (or MySQL). */
class MariaDbDedupAdminTest extends DedupAdminTests {
  private String database;

  @Override
  HikariDataSource createDataSource() {
    database = TestMariaDb.newDatabase("admin");
    return TestMariaDb.dataSource(database, TestMariaDb.Driver.MARIADB, 4);
  }

  @Override
  void dropDatabase() {
    TestMariaDb.dropDatabase(database);
  }

  @Override
  String expireLeaseSql() {
    return "UPDATE consumer_dedup SET lease_until = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND"
        + " WHERE biz_type = ? AND biz_key = ?";
  }

  @Override
  String schemaFile() {
    return "db/consumer-dedup/mysql/V1__consumer_dedup.sql";
  }
}
