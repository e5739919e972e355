package io.consumerdedup.mysql;

import io.consumerdedup.testing.TestMariaDb;

/** The store on MariaDB (or MySQL) through MySQL Connector/J. */
class MariaDbStoreMySqlDriverTest extends MySqlDialectStoreTests {
  @Override
  TestMariaDb.Driver driver() {
    return TestMariaDb.Driver.MYSQL;
  }
}
