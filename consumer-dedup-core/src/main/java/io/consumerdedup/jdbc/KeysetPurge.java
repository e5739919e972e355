package io.consumerdedup.jdbc;

import io.consumerdedup.jdbc.internal.PurgeSql;
import io.consumerdedup.jdbc.internal.StoreCalls;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import org.jspecify.annotations.Nullable;

/**
 * The janitor's statements on a {@link JdbcDedupStore}: batches of expired rows deleted from a
 * keyset cursor, and the backlog estimate. Each call is a store call (its retries, timeouts and
 * error mapping).
 */
final class KeysetPurge {
  /** A row's place in the purge's order. */
  record Position(Instant createdAt, String bizType, String bizKey) {}

  /**
   * One batch: the rows it deleted, whether it found as many expired rows as it may delete (so more
   * may follow), and the last position it reached (null if it found none).
   */
  record Batch(int deleted, boolean full, @Nullable Position last) {}

  /** The expired rows among the oldest ones and how long ago the first expired (null if none). */
  record Estimate(long expiredRows, @Nullable Duration oldestExpiredAge) {}

  private final JdbcDedupStore store;
  private final StoreCalls calls;
  private final PurgeSql postgres;
  private final PurgeSql mysql;

  KeysetPurge(JdbcDedupStore store) {
    this.store = store;
    this.calls = store.calls();
    this.postgres = new PurgeSql(store.tableName(), true);
    this.mysql = new PurgeSql(store.tableName(), false);
  }

  /** Deletes up to {@code limit} expired rows after {@code after} (from the start when null). */
  Batch deleteAfter(@Nullable Position after, int limit) {
    return calls.run(
        "purge",
        null,
        connection ->
            store.knownDialect() == SqlDialect.MYSQL
                ? deleteMySql(connection, after, limit)
                : deletePostgres(connection, after, limit));
  }

  private Batch deletePostgres(Connection connection, @Nullable Position after, int limit)
      throws SQLException {
    try (PreparedStatement statement =
        calls.prepare(connection, postgres.deleteBatch(after != null))) {
      int index = bindCursor(statement, after, SqlDialect.POSTGRESQL);
      statement.setInt(index, limit);
      try (ResultSet row = statement.executeQuery()) {
        if (!row.next()) {
          return new Batch(0, false, after);
        }
        int deleted = row.getInt("deleted");
        Position last =
            new Position(
                row.getObject("created_at", OffsetDateTime.class).toInstant(),
                row.getString("biz_type"),
                row.getString("biz_key"));
        return new Batch(deleted, deleted >= limit, last);
      }
    }
  }

  /**
   * MySQL deletes with ORDER BY but answers no rows and skips no locks: the batch's positions are
   * read first, then the rows up to the last of them are deleted if still expired.
   */
  private Batch deleteMySql(Connection connection, @Nullable Position after, int limit)
      throws SQLException {
    int found = 0;
    Position last = null;
    try (PreparedStatement select = calls.prepare(connection, mysql.selectBatch(after != null))) {
      int index = bindCursor(select, after, SqlDialect.MYSQL);
      select.setInt(index, limit);
      try (ResultSet rows = select.executeQuery()) {
        while (rows.next()) {
          found++;
          last =
              new Position(
                  rows.getObject("created_at", LocalDateTime.class).toInstant(ZoneOffset.UTC),
                  rows.getString("biz_type"),
                  rows.getString("biz_key"));
        }
      }
    }
    if (last == null) {
      return new Batch(0, false, after);
    }
    try (PreparedStatement delete = calls.prepare(connection, mysql.deleteThrough(after != null))) {
      int index = bindCursor(delete, after, SqlDialect.MYSQL);
      Object createdAt = JdbcDedupAdmin.time(last.createdAt(), SqlDialect.MYSQL);
      delete.setObject(index++, createdAt);
      delete.setObject(index++, createdAt);
      delete.setString(index++, last.bizType());
      delete.setString(index++, last.bizType());
      delete.setString(index, last.bizKey());
      return new Batch(delete.executeUpdate(), found >= limit, last);
    }
  }

  /** Binds the cursor, if any, from parameter 1; answers the next parameter's index. */
  private static int bindCursor(
      PreparedStatement statement, @Nullable Position after, SqlDialect dialect)
      throws SQLException {
    int index = 1;
    if (after != null) {
      Object createdAt = JdbcDedupAdmin.time(after.createdAt(), dialect);
      statement.setObject(index++, createdAt);
      statement.setObject(index++, createdAt);
      statement.setObject(index++, createdAt);
      statement.setString(index++, after.bizType());
      statement.setString(index++, after.bizType());
      statement.setString(index++, after.bizKey());
    }
    return index;
  }

  /** Counts the expired rows among the oldest {@value PurgeSql#BACKLOG_SAMPLE}. */
  Estimate estimate() {
    return calls.run(
        "purge backlog",
        null,
        connection -> {
          PurgeSql sql = store.knownDialect() == SqlDialect.MYSQL ? mysql : postgres;
          try (PreparedStatement statement = calls.prepare(connection, sql.backlog)) {
            statement.setInt(1, PurgeSql.BACKLOG_SAMPLE);
            try (ResultSet row = statement.executeQuery()) {
              row.next();
              long oldestMillis = row.getLong("oldest_ms");
              Duration oldest = row.wasNull() ? null : Duration.ofMillis(oldestMillis);
              return new Estimate(row.getLong("expired"), oldest);
            }
          }
        });
  }
}
