package io.consumerdedup.jdbc;

import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.core.internal.StoredText;
import io.consumerdedup.jdbc.internal.MySqlSql;
import io.consumerdedup.jdbc.internal.StoreCalls;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import org.jspecify.annotations.Nullable;

/**
 * The store's operations on MySQL and MariaDB, on a connection that {@link JdbcDedupStore} lends
 * (its retries, timeouts and error mapping apply as on PostgreSQL).
 *
 * <p>A claim inserts or locks every key's row first ({@link MySqlSql#lockOrInsert}), reads the rows
 * under that lock, and only then takes over the ones a FAILED attempt or an expired lease left
 * claimable. So there is no check-then-insert window: under InnoDB's REPEATABLE READ a concurrent
 * claim of the same key waits on the row lock and then reads the committed outcome. Whether a row
 * is this claim's own is read from its {@code claim_id}, not from affected-row counts, whose
 * meaning depends on the driver's found-rows setting (both drivers report found rows by default,
 * where {@code INSERT ... ON DUPLICATE KEY UPDATE} answers 1 for a new row and for an unchanged one
 * alike).
 */
final class MySqlStore {

  /** Concurrent batches lock their keys in one order, so they wait instead of deadlocking. */
  private static final Comparator<ClaimRequest> KEY_ORDER =
      Comparator.comparing((ClaimRequest r) -> r.key().bizType())
          .thenComparing(r -> r.key().bizKey());

  private final MySqlSql sql;
  private final Preparer preparer;

  @FunctionalInterface
  interface Preparer {
    PreparedStatement prepare(Connection connection, String sql) throws SQLException;
  }

  MySqlStore(String table, Preparer preparer) {
    this.sql = new MySqlSql(table);
    this.preparer = preparer;
  }

  /**
   * Claims {@code requests} (distinct keys). In its own transaction when the connection is in
   * auto-commit mode, else in the caller's (which it never commits).
   */
  List<ClaimResult> claim(Connection connection, List<ClaimRequest> requests, boolean withLease)
      throws SQLException {
    if (connection.getAutoCommit()) {
      return StoreCalls.inOwnTransaction(connection, c -> claimLocked(c, requests, withLease));
    }
    return claimLocked(connection, requests, withLease);
  }

  private List<ClaimResult> claimLocked(
      Connection connection, List<ClaimRequest> requests, boolean withLease) throws SQLException {
    List<ClaimRequest> ordered = requests.stream().sorted(KEY_ORDER).toList();
    try (PreparedStatement insert =
        preparer.prepare(connection, sql.lockOrInsert(ordered.size(), withLease))) {
      int index = 1;
      for (ClaimRequest request : ordered) {
        insert.setString(index++, request.key().bizType());
        insert.setString(index++, request.key().bizKey());
        insert.setString(index++, request.owner());
        insert.setLong(index++, request.lease().toMillis());
        insert.setString(index++, request.fingerprint());
        insert.setString(
            index++, StoredText.storable(request.source(), StoredText.MAX_SOURCE_LENGTH));
        insert.setLong(index++, keep(request, withLease));
        insert.setString(index++, request.claimId());
      }
      insert.executeUpdate();
    }
    Map<Map.Entry<String, String>, ClaimRequest> byKey = new HashMap<>();
    ordered.forEach(r -> byKey.put(Map.entry(r.key().bizType(), r.key().bizKey()), r));
    Map<Map.Entry<String, String>, ResultRow> rows = new HashMap<>();
    try (PreparedStatement select = preparer.prepare(connection, sql.findLocked(ordered.size()))) {
      int index = 1;
      for (ClaimRequest request : ordered) {
        select.setString(index++, request.key().bizType());
        select.setString(index++, request.key().bizKey());
      }
      try (ResultSet row = select.executeQuery()) {
        while (row.next()) {
          Map.Entry<String, String> columns =
              Map.entry(row.getString("biz_type"), row.getString("biz_key"));
          ClaimRequest request = byKey.get(columns);
          if (request != null) {
            rows.put(
                columns,
                new ResultRow(
                    JdbcDedupStore.record(row, request.key(), SqlDialect.MYSQL),
                    row.getString("claim_id")));
          }
        }
      }
    }
    List<ClaimResult> results = new ArrayList<>(requests.size());
    for (ClaimRequest request : requests) {
      ResultRow row = rows.get(Map.entry(request.key().bizType(), request.key().bizKey()));
      if (row == null) {
        throw new DedupStoreException(
            "The dedup table did not return the row of "
                + request.key()
                + " that the claim had just locked: its key columns must compare byte for byte"
                + " (VARBINARY, as in "
                + SqlDialect.MYSQL.schemaResource()
                + ")",
            request.key(),
            request.source(),
            null);
      }
      results.add(answer(connection, request, row, withLease));
    }
    return results;
  }

  private ClaimResult answer(
      Connection connection, ClaimRequest request, ResultRow row, boolean withLease)
      throws SQLException {
    DedupRecord existing = row.record;
    DedupStatus claimedStatus = withLease ? DedupStatus.PROCESSING : DedupStatus.SUCCESS;
    if (request.claimId().equals(row.claimId) && existing.status() == claimedStatus) {
      // Inserted by this statement, or by an earlier try of this claim whose reply was lost (its
      // lease renewed by the statement that locked it).
      return new ClaimResult.Claimed(request.key(), existing.attempts(), request.claimId());
    }
    if (!claimable(existing, request)) {
      return new ClaimResult.Taken(request.key(), existing);
    }
    try (PreparedStatement update = preparer.prepare(connection, sql.takeOver(withLease))) {
      update.setString(1, request.owner());
      update.setLong(2, request.lease().toMillis());
      update.setString(3, request.claimId());
      update.setString(4, request.fingerprint());
      update.setString(5, StoredText.storable(request.source(), StoredText.MAX_SOURCE_LENGTH));
      update.setLong(6, keep(request, withLease));
      update.setString(7, request.key().bizType());
      update.setString(8, request.key().bizKey());
      update.setInt(9, existing.attempts());
      if (update.executeUpdate() != 1) {
        // The row is locked by this transaction since the insert: nothing else can have moved it.
        throw new DedupStoreException(
            "The locked row of " + request.key() + " changed under its claim",
            request.key(),
            request.source(),
            null);
      }
    }
    return new ClaimResult.Claimed(request.key(), existing.attempts() + 1, request.claimId());
  }

  /** A FAILED attempt or an expired lease, with no other payload: the next claim takes it. */
  private static boolean claimable(DedupRecord existing, ClaimRequest request) {
    String stored = existing.fingerprint().orElse(null);
    if (stored != null && request.fingerprint() != null && !stored.equals(request.fingerprint())) {
      return false;
    }
    return existing.status() == DedupStatus.FAILED
        || (existing.status() == DedupStatus.PROCESSING && !existing.isLeaseLive());
  }

  private static long keep(ClaimRequest request, boolean withLease) {
    return (withLease ? request.lease().plus(request.retention()) : request.retention()).toMillis();
  }

  /**
   * A fenced update of one key (complete, fail, renew): true if the token still held the key. The
   * statement always moves {@code updated_at}, so the count is the same whether the driver reports
   * found or changed rows.
   */
  boolean fenced(
      Connection connection,
      String operation,
      DedupKey key,
      int token,
      long durationMillis,
      @Nullable String error)
      throws SQLException {
    String statementSql =
        switch (operation) {
          case "complete" -> sql.complete;
          case "fail" -> sql.fail;
          case "renew" -> sql.renew;
          default -> throw new IllegalArgumentException(operation);
        };
    try (PreparedStatement update = preparer.prepare(connection, statementSql)) {
      int index = 1;
      if (operation.equals("fail")) {
        update.setString(index++, error);
      }
      update.setLong(index++, durationMillis);
      update.setString(index++, key.bizType());
      update.setString(index++, key.bizKey());
      update.setInt(index, token);
      return update.executeUpdate() == 1;
    }
  }

  /**
   * Writes the outcome of {@code operation} (complete or fail) again for a key that has no record
   * at all; true if it was written, false if a record exists.
   */
  boolean writeVanished(
      Connection connection,
      String operation,
      DedupKey key,
      int token,
      long retentionMillis,
      @Nullable String error)
      throws SQLException {
    boolean failed = operation.equals("fail");
    try (PreparedStatement insert =
        preparer.prepare(connection, failed ? sql.failVanished : sql.completeVanished)) {
      int index = 1;
      insert.setString(index++, key.bizType());
      insert.setString(index++, key.bizKey());
      insert.setInt(index++, token);
      if (failed) {
        insert.setString(index++, error);
      }
      insert.setLong(index, retentionMillis);
      return insert.executeUpdate() == 1;
    }
  }

  /** Gives back one claim whose handler never ran; true if it was released. */
  boolean release(Connection connection, ClaimResult.Claimed claim) throws SQLException {
    for (String statementSql : List.of(sql.releaseDelete, sql.releaseRestore)) {
      try (PreparedStatement statement = preparer.prepare(connection, statementSql)) {
        statement.setString(1, claim.key().bizType());
        statement.setString(2, claim.key().bizKey());
        statement.setInt(3, claim.token());
        statement.setString(4, claim.claimId());
        if (statement.executeUpdate() == 1) {
          return true;
        }
      }
    }
    return false;
  }

  @Nullable DedupRecord find(Connection connection, DedupKey key) throws SQLException {
    try (PreparedStatement statement = preparer.prepare(connection, sql.find)) {
      statement.setString(1, key.bizType());
      statement.setString(2, key.bizKey());
      try (ResultSet row = statement.executeQuery()) {
        return row.next() ? JdbcDedupStore.record(row, key, SqlDialect.MYSQL) : null;
      }
    }
  }

  int purge(Connection connection, int limit) throws SQLException {
    try (PreparedStatement statement = preparer.prepare(connection, sql.purge)) {
      statement.setInt(1, limit);
      return statement.executeUpdate();
    }
  }

  /** The names of the table's columns; none if there is no such table. */
  List<String> columns(Connection connection, String table) throws SQLException {
    int dot = table.indexOf('.');
    List<String> names = new ArrayList<>();
    try (PreparedStatement statement = preparer.prepare(connection, sql.columns)) {
      statement.setString(1, dot < 0 ? null : table.substring(0, dot));
      statement.setString(2, dot < 0 ? table : table.substring(dot + 1));
      try (ResultSet rows = statement.executeQuery()) {
        while (rows.next()) {
          names.add(rows.getString(1).toLowerCase(Locale.ROOT));
        }
      }
    }
    return names;
  }

  private record ResultRow(DedupRecord record, @Nullable String claimId) {
    ResultRow {
      Objects.requireNonNull(record);
    }
  }
}
