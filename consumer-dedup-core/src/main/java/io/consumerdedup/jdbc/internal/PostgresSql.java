package io.consumerdedup.jdbc.internal;

/**
 * The PostgreSQL statements of the store, for one validated table name. Every time is the
 * database's ({@code now()}); durations are bound as milliseconds.
 */
public final class PostgresSql {
  private static final String COLUMNS =
      "biz_type, biz_key, status, attempts, owner, lease_until, fingerprint, last_error, source,"
          + " created_at, updated_at, expires_at, (lease_until >= now()) AS lease_live, claim_id";

  /**
   * One round trip: a new key is inserted; a FAILED key or an expired lease is re-claimed with the
   * next token, unless the fingerprints disagree. No row back means the key was not claimed (or was
   * already claimed by this very request, whose first reply was lost: the claim id tells).
   */
  public final String claim;

  /**
   * As {@link #claim}, but the row is written as SUCCESS at once, in the caller's transaction: the
   * unique key makes a concurrent copy wait for that transaction's outcome.
   */
  public final String claimInTransaction;

  public final String find;

  /**
   * Fenced: applies only while the token holds the key. A SUCCESS already written under the same
   * token matches too, so a retry whose first reply was lost sees its own write, not a lost lease:
   * only the token's holder can have written it.
   */
  public final String complete;

  /** Fenced like {@link #complete}; a FAILED already written under the same token matches too. */
  public final String fail;

  public final String renew;

  /**
   * Deletes one batch of expired rows. SKIP LOCKED lets many instances purge at once without
   * waiting on each other or on a claim; a PROCESSING row with a live lease is never deleted.
   */
  public final String purge;

  /** The table's columns, or no row when there is no such table (on the search path). */
  public final String columns;

  /** The columns the store reads and writes, as the schema file creates them. */
  public static final java.util.List<String> EXPECTED_COLUMNS =
      java.util.List.of(
          "biz_type",
          "biz_key",
          "status",
          "attempts",
          "owner",
          "lease_until",
          "fingerprint",
          "last_error",
          "source",
          "created_at",
          "updated_at",
          "expires_at",
          "claim_id");

  public PostgresSql(String table) {
    columns =
        "SELECT a.attname FROM pg_attribute a WHERE a.attrelid = to_regclass(?)"
            + " AND a.attnum > 0 AND NOT a.attisdropped";
    claim =
        "INSERT INTO "
            + table
            + " AS d (biz_type, biz_key, status, attempts, owner, lease_until, fingerprint, source,"
            + " created_at, updated_at, expires_at, claim_id)"
            + " VALUES (?, ?, 'PROCESSING', 1, ?, now() + ? * interval '1 millisecond', ?, ?, now(),"
            + " now(), now() + ? * interval '1 millisecond', ?)"
            + " ON CONFLICT (biz_type, biz_key) DO UPDATE SET status = 'PROCESSING',"
            + " attempts = d.attempts + 1, owner = excluded.owner, lease_until = excluded.lease_until,"
            + " claim_id = excluded.claim_id,"
            + " fingerprint = COALESCE(d.fingerprint, excluded.fingerprint), source = excluded.source,"
            + " updated_at = now(), expires_at = excluded.expires_at"
            + " WHERE (d.status = 'FAILED' OR (d.status = 'PROCESSING' AND d.lease_until < now()))"
            + " AND (d.fingerprint IS NULL OR excluded.fingerprint IS NULL"
            + " OR d.fingerprint = excluded.fingerprint)"
            + " RETURNING d.attempts";
    claimInTransaction =
        "INSERT INTO "
            + table
            + " AS d (biz_type, biz_key, status, attempts, owner, lease_until, fingerprint, source,"
            + " created_at, updated_at, expires_at, claim_id)"
            + " VALUES (?, ?, 'SUCCESS', 1, ?, NULL, ?, ?, now(), now(),"
            + " now() + ? * interval '1 millisecond', ?)"
            + " ON CONFLICT (biz_type, biz_key) DO UPDATE SET status = 'SUCCESS',"
            + " attempts = d.attempts + 1, owner = excluded.owner, lease_until = NULL,"
            + " claim_id = excluded.claim_id,"
            + " fingerprint = COALESCE(d.fingerprint, excluded.fingerprint), source = excluded.source,"
            + " updated_at = now(), expires_at = excluded.expires_at"
            + " WHERE (d.status = 'FAILED' OR (d.status = 'PROCESSING' AND d.lease_until < now()))"
            + " AND (d.fingerprint IS NULL OR excluded.fingerprint IS NULL"
            + " OR d.fingerprint = excluded.fingerprint)"
            + " RETURNING d.attempts";
    find = "SELECT " + COLUMNS + " FROM " + table + " WHERE biz_type = ? AND biz_key = ?";
    complete =
        "UPDATE "
            + table
            + " SET status = 'SUCCESS', lease_until = NULL, updated_at = now(),"
            + " expires_at = now() + ? * interval '1 millisecond'"
            + " WHERE biz_type = ? AND biz_key = ? AND attempts = ?"
            + " AND status IN ('PROCESSING', 'SUCCESS')";
    fail =
        "UPDATE "
            + table
            + " SET status = 'FAILED', lease_until = NULL, last_error = ?, updated_at = now(),"
            + " expires_at = now() + ? * interval '1 millisecond'"
            + " WHERE biz_type = ? AND biz_key = ? AND attempts = ?"
            + " AND status IN ('PROCESSING', 'FAILED')";
    renew =
        "UPDATE "
            + table
            + " SET lease_until = now() + ? * interval '1 millisecond', updated_at = now()"
            + " WHERE biz_type = ? AND biz_key = ? AND attempts = ? AND status = 'PROCESSING'";
    purge =
        "DELETE FROM "
            + table
            + " WHERE (biz_type, biz_key) IN (SELECT biz_type, biz_key FROM "
            + table
            + " WHERE expires_at < now() AND (status <> 'PROCESSING' OR lease_until < now())"
            + " ORDER BY expires_at LIMIT ? FOR UPDATE SKIP LOCKED)";
  }
}
