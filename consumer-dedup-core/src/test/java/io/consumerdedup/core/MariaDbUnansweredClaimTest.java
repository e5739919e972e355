package io.consumerdedup.core;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.testing.TestMariaDb;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** {@link UnansweredClaimTest} on MariaDB. */
class MariaDbUnansweredClaimTest {
  private static String database;
  private static HikariDataSource dataSource;

  @BeforeAll
  static void setUp() {
    database = TestMariaDb.newDatabase("unanswered");
    dataSource = TestMariaDb.dataSource(database, TestMariaDb.Driver.MARIADB, 6);
  }

  @AfterAll
  static void tearDown() {
    if (dataSource != null) {
      dataSource.close();
    }
    if (database != null) {
      TestMariaDb.dropDatabase(database);
    }
  }

  @Test
  void twoThreadsSharingTheExecutorAfterAnUnansweredClaimRunTheHandlerOnce() throws Exception {
    UnansweredClaimTest.twoCallersAfterAnUnansweredClaimRunTheHandlerOnce(dataSource);
  }

  @Test
  void aClaimTakenUpNearTheEndOfItsLeaseIsNotTakenOverDuringASlowHandler() throws Exception {
    UnansweredClaimTest.aClaimTakenUpNearTheEndOfItsLeaseHoldsTheKeyThroughASlowHandler(dataSource);
  }
}
