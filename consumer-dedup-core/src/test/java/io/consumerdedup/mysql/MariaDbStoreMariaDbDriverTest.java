package io.consumerdedup.mysql;

import io.consumerdedup.testing.TestMariaDb;

/** The store on MariaDB (or MySQL) through MariaDB Connector/J. */
class MariaDbStoreMariaDbDriverTest extends MySqlDialectStoreTests {
  @Override
  TestMariaDb.Driver driver() {
    return TestMariaDb.Driver.MARIADB;
  }
}
