package io.consumerdedup.jdbc.internal;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowableOfType;

import io.consumerdedup.core.DedupStoreUnavailableException;
import io.consumerdedup.testing.TestMariaDb;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import org.junit.jupiter.api.Test;

/**
 * The ways MySQL and MariaDB refuse a write because the server, not the statement, is read-only: a
 * failover whose address moves late leaves the pool's connections on such a server, and only
 * another connection reaches the promoted primary. Each is a read-only server (the store closes the
 * connection) and transient (the call is tried again), as {@code read_only}'s 1290 is.
 */
class SqlStatesReadOnlyTest {

  /**
   * A server started with {@code innodb_read_only} (a replica or standby so started; it cannot be
   * set at runtime, so no test server can be made to answer this way) refuses every write to an
   * InnoDB table with ER_OPEN_AS_READONLY, whatever the account's privileges: {@code read_only}'s
   * 1290 stops only accounts without READ_ONLY ADMIN (or SUPER).
   */
  @Test
  void aTableReadOnlyUnderInnodbReadOnlyIsAReadOnlyServerWorthAnotherTry() {
    SQLException refused = new SQLException("Table 'consumer_dedup' is read only", "HY000", 1036);

    assertThat(SqlStates.isReadOnlyServer(refused))
        .as("[1036 closes the connection] a server started with innodb_read_only")
        .isTrue();
    assertThat(SqlStates.classify(refused))
        .as("[1036 is tried again] a server started with innodb_read_only")
        .isEqualTo(SqlStates.Kind.TRANSIENT);
    assertThat(SqlStates.storeException("Dedup store claim", null, refused))
        .as("[what the caller is told of 1036]")
        .isInstanceOf(DedupStoreUnavailableException.class);
  }

  /**
   * MySQL's "Running in read-only mode" (ER_READ_ONLY_MODE, 1836): what InnoDB says when it runs
   * with {@code innodb_read_only}, as the error of a statement or beside 1036.
   */
  @Test
  void runningInReadOnlyModeIsAReadOnlyServerWorthAnotherTry() {
    SQLException refused = new SQLException("Running in read-only mode", "HY000", 1836);

    assertThat(SqlStates.isReadOnlyServer(refused)).as("[1836 closes the connection]").isTrue();
    assertThat(SqlStates.classify(refused))
        .as("[1836 is tried again]")
        .isEqualTo(SqlStates.Kind.TRANSIENT);
  }

  /**
   * A write in a read-only transaction is refused with 1792, SQL state 25006, on a real server: the
   * state PostgreSQL gives a standby's refusal, so it is classed as that is.
   */
  @Test
  void aWriteInAReadOnlyTransactionOnARealServerIsAReadOnlyServerWorthAnotherTry()
      throws SQLException {
    String database = TestMariaDb.newDatabase("readonlytx");
    try (Connection connection = TestMariaDb.connect(database, TestMariaDb.Driver.MARIADB);
        Statement statement = connection.createStatement()) {
      statement.execute("CREATE TABLE written (id INT PRIMARY KEY) ENGINE=InnoDB");
      statement.execute("START TRANSACTION READ ONLY");
      SQLException refused =
          catchThrowableOfType(
              SQLException.class, () -> statement.execute("INSERT INTO written VALUES (1)"));
      statement.execute("ROLLBACK");

      assertThat((Throwable) refused).as("[the insert in a READ ONLY transaction]").isNotNull();
      assertThat(refused.getErrorCode()).as("[the server's error code]").isEqualTo(1792);
      assertThat(refused.getSQLState()).as("[the server's SQL state]").isEqualTo("25006");
      assertThat(SqlStates.isReadOnlyServer(refused)).as("[1792 closes the connection]").isTrue();
      assertThat(SqlStates.classify(refused))
          .as("[1792 is tried again]")
          .isEqualTo(SqlStates.Kind.TRANSIENT);
    } finally {
      TestMariaDb.dropDatabase(database);
    }
  }
}
