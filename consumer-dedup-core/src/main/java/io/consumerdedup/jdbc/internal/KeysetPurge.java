package io.consumerdedup.jdbc.internal;

import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.time.Duration;
import java.time.Instant;
import org.jspecify.annotations.Nullable;

/**
 * The janitor's statements on the store's table: batches of expired rows deleted from a keyset
 * cursor ({@link Dialect#deleteExpired}), and the backlog estimate. Each call is a store call (its
 * retries, timeouts and error mapping).
 */
public final class KeysetPurge {
  /** A row's place in the purge's order. */
  public record Position(Instant createdAt, String bizType, String bizKey) {}

  /**
   * One batch: the rows it deleted, whether it found as many expired rows as it may delete (so more
   * may follow), and the last position it reached (null if it found none).
   */
  public record Batch(int deleted, boolean full, @Nullable Position last) {}

  /** The expired rows among the oldest ones and how long ago the first expired (null if none). */
  public record Estimate(long expiredRows, @Nullable Duration oldestExpiredAge) {}

  private final StoreCalls calls;
  private final @Nullable Duration shortestRetention;

  /** A purge that walks the index to its end, for rows of any retention. */
  public KeysetPurge(StoreCalls calls) {
    this(calls, null);
  }

  /**
   * A purge whose batches stop at the horizon {@code shortestRetention} before the database's now
   * (see {@link PurgeSql}); walks the index to its end when null.
   */
  public KeysetPurge(StoreCalls calls, @Nullable Duration shortestRetention) {
    this.calls = calls;
    this.shortestRetention = shortestRetention;
  }

  /** Deletes up to {@code limit} expired rows after {@code after} (from the start when null). */
  public Batch deleteAfter(@Nullable Position after, int limit) {
    return calls.run(
        "purge",
        null,
        (connection, dialect) ->
            dialect.deleteExpired(connection, after, shortestRetention, limit));
  }

  /**
   * Counts the expired rows among the oldest {@value PurgeSql#BACKLOG_SAMPLE}, those created before
   * the horizon when it has one.
   */
  public Estimate estimate() {
    return calls.run(
        "purge backlog",
        null,
        (connection, dialect) -> {
          try (PreparedStatement statement =
              calls.prepare(
                  connection,
                  dialect.purgeText(dialect.purgeSql().backlog(shortestRetention != null)))) {
            int index = 1;
            if (shortestRetention != null) {
              statement.setLong(index++, shortestRetention.toMillis());
            }
            statement.setInt(index, PurgeSql.BACKLOG_SAMPLE);
            dialect.executePurge(statement);
            try (ResultSet row = statement.getResultSet()) {
              row.next();
              long oldestMillis = row.getLong("oldest_ms");
              Duration oldest = row.wasNull() ? null : Duration.ofMillis(oldestMillis);
              return new Estimate(row.getLong("expired"), oldest);
            }
          }
        });
  }
}
