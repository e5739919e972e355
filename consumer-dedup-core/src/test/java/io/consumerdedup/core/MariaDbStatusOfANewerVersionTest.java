package io.consumerdedup.core;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.testing.TestMariaDb;

/** {@link StatusOfANewerVersionTests} on MariaDB (or MySQL). */
class MariaDbStatusOfANewerVersionTest extends StatusOfANewerVersionTests {
  private String database;

  @Override
  HikariDataSource createDataSource() {
    database = TestMariaDb.newDatabase("newer_status");
    return TestMariaDb.dataSource(database, TestMariaDb.Driver.MARIADB, 4);
  }

  @Override
  void dropDatabase() {
    TestMariaDb.dropDatabase(database);
  }
}
