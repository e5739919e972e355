package io.consumerdedup.core;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.testing.TestMariaDb;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** {@link CrashTakeoverTest} on MariaDB: a killed child JVM's key is taken over after its lease. */
class MariaDbCrashTakeoverTest {
  private static String database;
  private static HikariDataSource dataSource;

  @BeforeAll
  static void setUp() {
    database = TestMariaDb.newDatabase("crash");
    dataSource = TestMariaDb.dataSource(database, TestMariaDb.Driver.MARIADB, 2);
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
  void aKilledHolderBlocksTheKeyUntilItsLeaseExpiresThenAnotherConsumerTakesOver()
      throws Exception {
    CrashTakeoverTest.killedHolderIsTakenOverAfterItsLease(
        dataSource, TestMariaDb.url(database, TestMariaDb.Driver.MYSQL));
  }
}
