package io.consumerdedup.test.jdbc;

import io.consumerdedup.testing.TestMariaDb;

/** The store contract on MariaDB through MySQL Connector/J, the other driver users pick. */
class MySqlDriverDedupStoreContractTest extends MariaDbDedupStoreContractTest {
  @Override
  TestMariaDb.Driver driver() {
    return TestMariaDb.Driver.MYSQL;
  }
}
