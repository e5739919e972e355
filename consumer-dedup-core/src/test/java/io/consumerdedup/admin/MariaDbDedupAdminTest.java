package io.consumerdedup.admin;

import static org.assertj.core.api.Assertions.assertThat;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.DedupAdmin;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.jdbc.JdbcDedupAdmin;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TestMariaDb;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.time.Duration;
import java.time.temporal.ChronoUnit;
import org.junit.jupiter.api.Test;

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

  /**
   * A database whose clock is an hour behind the application's (its connection's clock set back, as
   * on a server whose time drifted): the record's times are the database's, and so must be the time
   * a release's note gives, or the note dates the release an hour after the row it wrote.
   */
  @Test
  void aReleaseNoteIsDatedByTheDatabaseClockAsTheRecordItWrote() throws SQLException {
    try (HikariDataSource behind =
        TestMariaDb.dataSource(
            TestMariaDb.baseUrl(),
            database,
            TestMariaDb.Driver.MARIADB,
            1,
            "SET timestamp = UNIX_TIMESTAMP() - 3600")) {
      JdbcDedupStore skewed = JdbcDedupStore.builder(behind).build();
      DedupKey key = DedupKey.of("skew-payment", "stuck-1");
      skewed.claim(
          new ClaimRequest(
              key, "hung-consumer", Duration.ofMinutes(1), Duration.ofDays(1), null, "o-0@1"));
      try (Connection connection = behind.getConnection();
          PreparedStatement expire = connection.prepareStatement(expireLeaseSql())) {
        expire.setString(1, key.bizType());
        expire.setString(2, key.bizKey());
        assertThat(expire.executeUpdate()).isEqualTo(1);
      }

      DedupAdmin.Change change = JdbcDedupAdmin.of(skewed).release(key, "alice");

      DedupRecord released = skewed.find(key).orElseThrow();
      String writtenAt = released.updatedAt().truncatedTo(ChronoUnit.SECONDS).toString();
      assertThat(released.lastError().orElseThrow())
          .as("the release's note")
          .contains("Released by alice at " + writtenAt + " while held by hung-consumer");
      assertThat(change.at().truncatedTo(ChronoUnit.SECONDS)).hasToString(writtenAt);
    }
  }
}
