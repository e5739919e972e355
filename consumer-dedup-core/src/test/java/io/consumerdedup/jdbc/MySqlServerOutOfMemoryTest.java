package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.testing.TestMariaDb;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.UUID;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * A MySQL or MariaDB server out of memory (ER_OUTOFMEMORY 1037, ER_OUT_OF_SORTMEMORY 1038) answers
 * with SQL state HY001, not the HY000 of its other errors: the claim waits for the memory as for an
 * outage and goes through, as for PostgreSQL's out_of_memory (53200). Taken for an error of the
 * setup, it failed at once. The server raises the errors here from a trigger, once, with the SQL
 * state it gives them.
 */
class MySqlServerOutOfMemoryTest {
  private static String database;
  private static HikariDataSource mariaDbDriver;
  private static HikariDataSource mySqlDriver;

  @BeforeAll
  static void createDatabase() {
    database = TestMariaDb.newDatabase("out_of_memory");
    mariaDbDriver = TestMariaDb.dataSource(database, TestMariaDb.Driver.MARIADB, 2);
    mySqlDriver = TestMariaDb.dataSource(database, TestMariaDb.Driver.MYSQL, 2);
  }

  @AfterAll
  static void dropDatabase() {
    mariaDbDriver.close();
    mySqlDriver.close();
    TestMariaDb.dropDatabase(database);
  }

  @ParameterizedTest(name = "error {0} through {1}")
  @CsvSource({"1037, MARIADB", "1038, MARIADB", "1037, MYSQL", "1038, MYSQL"})
  void aServerOutOfMemoryIsAnOutageTheClaimIsTriedAgainThrough(int code, TestMariaDb.Driver driver)
      throws SQLException {
    String table = "dedup_oom_" + code + "_" + driver.name().toLowerCase(java.util.Locale.ROOT);
    execute("CREATE TABLE " + table + " LIKE consumer_dedup");
    // Not transactional: the failed statement's rollback keeps the count down.
    execute("CREATE TABLE " + table + "_faults (left_to_fail INT NOT NULL) ENGINE=MyISAM");
    execute("INSERT INTO " + table + "_faults VALUES (1)");
    execute(
        "CREATE TRIGGER "
            + table
            + "_oom BEFORE INSERT ON "
            + table
            + " FOR EACH ROW BEGIN IF (SELECT left_to_fail FROM "
            + table
            + "_faults) > 0 THEN UPDATE "
            + table
            + "_faults SET left_to_fail = left_to_fail - 1; SIGNAL SQLSTATE 'HY001' SET"
            + " MYSQL_ERRNO = "
            + code
            + ", MESSAGE_TEXT = 'Out of memory'; END IF; END");
    JdbcDedupStore store =
        JdbcDedupStore.builder(driver == TestMariaDb.Driver.MARIADB ? mariaDbDriver : mySqlDriver)
            .tableName(table)
            .retryInitialBackoff(Duration.ofMillis(10))
            .build();

    ClaimResult claim =
        store.claim(
            new ClaimRequest(
                DedupKey.of("payment", UUID.randomUUID().toString()),
                "consumer-a",
                Duration.ofMinutes(1),
                Duration.ofDays(1),
                null,
                null));

    assertThat(claim)
        .as("the claim, tried again once the server had memory")
        .isInstanceOf(ClaimResult.Claimed.class);
    assertThat(faultsLeft(table)).as("the fault was raised").isZero();
  }

  private static int faultsLeft(String table) throws SQLException {
    try (Connection connection = mariaDbDriver.getConnection();
        Statement statement = connection.createStatement();
        var rows = statement.executeQuery("SELECT left_to_fail FROM " + table + "_faults")) {
      rows.next();
      return rows.getInt(1);
    }
  }

  private static void execute(String sql) throws SQLException {
    try (Connection connection = mariaDbDriver.getConnection();
        Statement statement = connection.createStatement()) {
      statement.execute(sql);
    }
  }
}
