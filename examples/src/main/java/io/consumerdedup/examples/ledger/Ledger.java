package io.consumerdedup.examples.ledger;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import javax.sql.DataSource;

/**
 * The demo's side effects, kept in PostgreSQL so that "charged twice" is visible: one {@code
 * ledger_entries} row per application, and the account balance it changes.
 */
public final class Ledger {

  /** The demo's own tables, created next to the dedup table in each run's schema. */
  public static final String DDL =
      """
      CREATE TABLE accounts (
          account_id    varchar(64) PRIMARY KEY,
          balance_cents bigint      NOT NULL
      );
      CREATE TABLE ledger_entries (
          id           bigserial    PRIMARY KEY,
          kind         varchar(16)  NOT NULL,
          business_key varchar(256) NOT NULL,
          account_id   varchar(64)  NOT NULL REFERENCES accounts,
          amount_cents bigint       NOT NULL,
          applied_by   varchar(128) NOT NULL,
          applied_at   timestamptz  NOT NULL DEFAULT now()
      );
      """;

  /** {@link #DDL} for MySQL and MariaDB, one statement per element. */
  public static final java.util.List<String> MYSQL_DDL =
      java.util.List.of(
          """
          CREATE TABLE accounts (
              account_id    varchar(64) PRIMARY KEY,
              balance_cents bigint      NOT NULL
          )""",
          """
          CREATE TABLE ledger_entries (
              id           bigint       AUTO_INCREMENT PRIMARY KEY,
              kind         varchar(16)  NOT NULL,
              business_key varchar(256) NOT NULL,
              account_id   varchar(64)  NOT NULL REFERENCES accounts (account_id),
              amount_cents bigint       NOT NULL,
              applied_by   varchar(128) NOT NULL,
              applied_at   datetime(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
          )""");

  private final DataSource dataSource;

  public Ledger(DataSource dataSource) {
    this.dataSource = dataSource;
  }

  /** Opens the account of {@code kind} at its opening balance. */
  public void open(EffectKind kind) throws SQLException {
    try (Connection connection = dataSource.getConnection();
        PreparedStatement insert =
            connection.prepareStatement(
                "INSERT INTO accounts (account_id, balance_cents) VALUES (?, ?)")) {
      insert.setString(1, kind.account());
      insert.setLong(2, kind.openingBalance());
      insert.executeUpdate();
    }
  }

  /**
   * Applies one effect in a transaction: the entry and the balance change together. If the
   * DataSource hands out a connection with a transaction already open (one bound to the caller's
   * transaction, for {@code DedupMode.TRANSACTIONAL}), the effect joins that transaction and
   * commits or rolls back with it; otherwise it commits on its own.
   */
  public void apply(EffectKind kind, String businessKey, String appliedBy) throws SQLException {
    try (Connection connection = dataSource.getConnection()) {
      if (!connection.getAutoCommit()) {
        apply(connection, kind, businessKey, appliedBy);
        return;
      }
      connection.setAutoCommit(false);
      try {
        apply(connection, kind, businessKey, appliedBy);
        connection.commit();
      } catch (SQLException | RuntimeException e) {
        connection.rollback();
        throw e;
      } finally {
        connection.setAutoCommit(true);
      }
    }
  }

  /** Applies one effect on {@code connection}, in whatever transaction the caller has open. */
  public void apply(Connection connection, EffectKind kind, String businessKey, String appliedBy)
      throws SQLException {
    try (PreparedStatement entry =
            connection.prepareStatement(
                "INSERT INTO ledger_entries (kind, business_key, account_id, amount_cents,"
                    + " applied_by) VALUES (?, ?, ?, ?, ?)");
        PreparedStatement balance =
            connection.prepareStatement(
                "UPDATE accounts SET balance_cents = balance_cents + ? WHERE account_id = ?")) {
      entry.setString(1, kind.name());
      entry.setString(2, businessKey);
      entry.setString(3, kind.account());
      entry.setLong(4, kind.amount());
      entry.setString(5, appliedBy);
      entry.executeUpdate();
      balance.setLong(1, kind.amount());
      balance.setString(2, kind.account());
      if (balance.executeUpdate() != 1) {
        throw new SQLException("Account " + kind.account() + " is not open");
      }
    }
  }

  /** How many times effects of {@code kind} were applied. */
  public int entries(EffectKind kind) throws SQLException {
    return queryLong("SELECT count(*) FROM ledger_entries WHERE kind = ?", kind.name()).intValue();
  }

  /** For how many distinct business keys effects of {@code kind} were applied. */
  public int actionsApplied(EffectKind kind) throws SQLException {
    return queryLong(
            "SELECT count(DISTINCT business_key) FROM ledger_entries WHERE kind = ?", kind.name())
        .intValue();
  }

  public long balance(EffectKind kind) throws SQLException {
    return queryLong("SELECT balance_cents FROM accounts WHERE account_id = ?", kind.account());
  }

  private Long queryLong(String sql, String parameter) throws SQLException {
    try (Connection connection = dataSource.getConnection();
        PreparedStatement query = connection.prepareStatement(sql)) {
      query.setString(1, parameter);
      try (ResultSet rows = query.executeQuery()) {
        if (!rows.next()) {
          throw new SQLException("No row for " + parameter + " in: " + sql);
        }
        return rows.getLong(1);
      }
    }
  }
}
