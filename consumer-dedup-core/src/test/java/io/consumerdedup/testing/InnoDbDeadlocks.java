package io.consumerdedup.testing;

import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.concurrent.FutureTask;
import java.util.concurrent.TimeUnit;
import javax.sql.DataSource;

/**
 * A real InnoDB deadlock (1213) whose victim is a chosen transaction, made deterministically: the
 * victim and another transaction each lock one of two account rows and then wait for the other's,
 * and InnoDB rolls back the one that wrote fewer rows, which the other makes sure of by writing
 * ballast first.
 */
public final class InnoDbDeadlocks {
  private InnoDbDeadlocks() {}

  /** Creates the two accounts the deadlock is between, and the ballast table. */
  public static void createTables(Connection connection) throws SQLException {
    try (Statement statement = connection.createStatement()) {
      statement.execute("CREATE TABLE account (id INT PRIMARY KEY, balance INT NOT NULL)");
      statement.execute("INSERT INTO account VALUES (1, 0), (2, 0)");
      statement.execute("CREATE TABLE ballast (id INT PRIMARY KEY)");
    }
  }

  /**
   * Makes {@code victim}'s open transaction the victim of a deadlock with a transaction on a
   * connection of {@code others}.
   *
   * @throws SQLException always: the deadlock (1213), as the victim's statement threw it; InnoDB
   *     has rolled {@code victim}'s whole transaction back by then
   * @throws AssertionError no deadlock, or another error than 1213
   */
  public static void deadlock(Connection victim, DataSource others) throws Exception {
    try (Statement statement = victim.createStatement()) {
      statement.executeUpdate("UPDATE account SET balance = balance + 1 WHERE id = 1");
    }
    try (Connection other = others.getConnection()) {
      other.setAutoCommit(false);
      try (Statement statement = other.createStatement()) {
        // The heavier transaction: InnoDB's victim is the one that wrote fewer rows. Ballast rows
        // of a recursive CTE, which MySQL 8 runs too (MariaDB's sequence tables are its own).
        statement.executeUpdate(
            "INSERT INTO ballast WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n"
                + " WHERE i < 200) SELECT i FROM n");
        statement.executeUpdate("UPDATE account SET balance = balance + 1 WHERE id = 2");
      }
      // Whichever of the two statements waits first, InnoDB finds the cycle when the second does.
      FutureTask<Integer> waiting =
          new FutureTask<>(
              () -> {
                try (Statement statement = other.createStatement()) {
                  return statement.executeUpdate(
                      "UPDATE account SET balance = balance + 1 WHERE id = 1");
                }
              });
      new Thread(waiting, "deadlock-other").start();
      SQLException deadlock;
      try (Statement statement = victim.createStatement()) {
        statement.executeUpdate("UPDATE account SET balance = balance + 1 WHERE id = 2");
        throw new AssertionError("no deadlock");
      } catch (SQLException e) {
        deadlock = e;
      }
      waiting.get(10, TimeUnit.SECONDS);
      other.rollback();
      if (deadlock.getErrorCode() != 1213) {
        throw new AssertionError("expected a deadlock (1213), got " + deadlock, deadlock);
      }
      throw deadlock;
    }
  }
}
