package io.consumerdedup.jdbc.internal;

import io.consumerdedup.core.DedupStatus;
import java.util.Arrays;
import java.util.stream.Collectors;
import org.jspecify.annotations.Nullable;

/**
 * The statements of the admin operations, for one validated table name and one dialect's clock
 * ({@code now()} on PostgreSQL, {@code UTC_TIMESTAMP(6)} on MySQL): the rest of their text is the
 * same in both.
 */
public final class AdminSql {
  private final String table;
  private final String now;

  /** Counts per biz type and status, with the expired leases among PROCESSING ones. */
  public final String counts;

  /** The record of one key, by (type, key). */
  public final String find;

  /**
   * The record of one key, locked, by (type, key), with the database's time as {@code read_at}:
   * what a change of the record is dated by, as the record's own times are.
   */
  public final String findLocked;

  /**
   * Marks a PROCESSING attempt FAILED, by (error, keep ms, type, key, attempts as read), the error
   * as the dialect's failures bind theirs (on MySQL its UTF-8 bytes, whatever the connection sends
   * text as: an operator's name with an emoji was refused through a connection that sends utf8mb3,
   * and the key could not be released): its holder's token no longer writes PROCESSING or SUCCESS.
   * The record is kept at least {@code keep} from now: its claim's expiry is counted from the
   * claim, and a holder that renewed its lease for longer than the claim's lease and retention left
   * it in the past, so the purge deleted the released record at once (its attempts and the
   * release's note with it).
   */
  public final String release;

  /** Deletes one key's record, by (type, key). */
  public final String forget;

  /**
   * @param now the database's time
   * @param nowPlusMs the database's time plus a bound number of milliseconds
   * @param errorText the error of a FAILED record as the dialect's statements take it, bound by
   *     {@link Dialect#setError}
   */
  public AdminSql(String table, String now, String nowPlusMs, String errorText) {
    this.table = table;
    this.now = now;
    counts =
        "SELECT biz_type, status, count(*) AS records,"
            + " sum(CASE WHEN status = 'PROCESSING' AND lease_until < "
            + now
            + " THEN 1 ELSE 0 END) AS expired FROM "
            + table
            + " GROUP BY biz_type, status ORDER BY biz_type, status";
    find = select() + " WHERE biz_type = ? AND biz_key = ?";
    findLocked =
        "SELECT " + now + " AS read_at, " + find.substring("SELECT ".length()) + " FOR UPDATE";
    release =
        "UPDATE "
            + table
            + " SET status = 'FAILED', lease_until = NULL, last_error = "
            + errorText
            + ", updated_at = "
            + now
            + ", expires_at = GREATEST(expires_at, "
            + nowPlusMs
            + ") WHERE biz_type = ? AND biz_key = ? AND attempts = ? AND status = 'PROCESSING'";
    forget = "DELETE FROM " + table + " WHERE biz_type = ? AND biz_key = ?";
  }

  private String select() {
    return "SELECT biz_type, biz_key, status, attempts, owner, lease_until, fingerprint, last_error,"
        + " source, created_at, updated_at, expires_at, claim_id,"
        + " (lease_until IS NOT NULL AND lease_until >= "
        + now
        + ") AS lease_live FROM "
        + table;
  }

  /**
   * A page of records, oldest first, binding in order: the status (unless null or {@code UNKNOWN}),
   * the biz type (if given), the cursor's (created_at, created_at, biz_type, biz_type, biz_key) if
   * given, then the limit.
   *
   * @param status null, a status's name, or {@code UNKNOWN}: every status but the known ones
   * @param lease null, {@code LIVE} or {@code EXPIRED}
   */
  public String list(
      @Nullable DedupStatus status, boolean byType, @Nullable String lease, boolean afterCursor) {
    StringBuilder sql = new StringBuilder(select()).append(" WHERE 1 = 1");
    if (status == DedupStatus.UNKNOWN) {
      sql.append(" AND status NOT IN (")
          .append(
              Arrays.stream(DedupStatus.values())
                  .filter(known -> known != DedupStatus.UNKNOWN)
                  .map(known -> "'" + known.name() + "'")
                  .collect(Collectors.joining(", ")))
          .append(")");
    } else if (status != null) {
      sql.append(" AND status = ?");
    }
    if (byType) {
      sql.append(" AND biz_type = ?");
    }
    if ("LIVE".equals(lease)) {
      sql.append(" AND status = 'PROCESSING' AND lease_until >= ").append(now);
    } else if ("EXPIRED".equals(lease)) {
      sql.append(" AND status = 'PROCESSING' AND lease_until < ").append(now);
    }
    if (afterCursor) {
      sql.append(
          " AND (created_at > ? OR (created_at = ? AND (biz_type > ?"
              + " OR (biz_type = ? AND biz_key > ?))))");
    }
    return sql.append(" ORDER BY created_at, biz_type, biz_key LIMIT ?").toString();
  }
}
