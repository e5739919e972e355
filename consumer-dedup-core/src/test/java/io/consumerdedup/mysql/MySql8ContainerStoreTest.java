package io.consumerdedup.mysql;

import io.consumerdedup.testing.TestMariaDb;

/**
 * The store on MySQL 8 (a Testcontainers container) through MySQL Connector/J; skipped with a
 * message where Docker is not available.
 */
class MySql8ContainerStoreTest extends MySqlDialectStoreTests {
  @Override
  TestMariaDb.Driver driver() {
    return TestMariaDb.Driver.MYSQL;
  }

  @Override
  String server() {
    return TestMariaDb.mysql8Url();
  }
}
