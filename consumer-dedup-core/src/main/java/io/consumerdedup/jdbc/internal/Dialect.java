package io.consumerdedup.jdbc.internal;

import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.internal.StoredText;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.time.Instant;
import java.util.Comparator;
import java.util.List;
import java.util.Objects;
import java.util.Set;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;

/**
 * Everything the store, its admin and its janitor do differently on one database: one subclass per
 * dialect ({@link PostgresDialect}, {@link MySqlDialect}), chosen once from the first connection
 * (or as configured), so that no caller asks which database it is on. Every method runs on a
 * connection that a {@link StoreCalls} call lends, and prepares its statements with {@link
 * StoreCalls#prepare}: the call's timeouts, retries and error mapping apply to all of them.
 */
public abstract class Dialect {

  /**
   * Concurrent batches lock their keys in one order, so they wait instead of deadlocking: code
   * point order, the order of UTF-8's bytes, in which PostgreSQL's statements sort their keys too
   * ({@code COLLATE "C"}, whatever the database's collation, in a UTF8, SQL_ASCII or LATIN1
   * database). {@code String.compareTo} compares UTF-16 units, which put a supplementary character
   * (an emoji) before U+E000..U+FFFF; and a database's language collation ("b" before "C") differs
   * from both: a holder's renewal (ordered here) and its outcome write (ordered in SQL) then each
   * locked a key the other waited for.
   */
  protected static final Comparator<DedupKey> KEY_ORDER =
      Comparator.comparing(DedupKey::bizType, Dialect::compareCodePoints)
          .thenComparing(DedupKey::bizKey, Dialect::compareCodePoints);

  /** Compares {@code a} and {@code b} by code point, as {@code COLLATE "C"} does in UTF-8. */
  static int compareCodePoints(String a, String b) {
    int i = 0;
    int j = 0;
    while (i < a.length() && j < b.length()) {
      int x = a.codePointAt(i);
      int y = b.codePointAt(j);
      if (x != y) {
        return Integer.compare(x, y);
      }
      i += Character.charCount(x);
      j += Character.charCount(y);
    }
    return Boolean.compare(i < a.length(), j < b.length());
  }

  /**
   * The updates that apply only while the claim (its token and its claim id) still holds the key:
   * the token alone matches a claim of the key made anew after its record vanished, which starts
   * again at token 1.
   */
  public enum FencedUpdate {
    /**
     * SUCCESS, kept for the retention; a SUCCESS already written by the claim counts, as does one
     * under its token whose claim is not known (see {@link #FAIL}). So does a FAILED under its
     * token whose claim is not known and that carries the note of a takeover of this attempt's
     * expired lease ({@link io.consumerdedup.core.internal.TakeoverNote}): that takeover was given
     * back unrun, and nothing ran the handler after this attempt. The SUCCESS takes its claim id.
     */
    COMPLETE("complete", DedupStatus.SUCCESS),
    /**
     * FAILED with its error, kept for the retention; a FAILED already written by the claim counts,
     * as does one under its token whose claim is not known: a release of the next claim gave the
     * key back to this attempt's FAILED ({@link #release}), or a version that did not fence
     * outcomes by claim id wrote it again after its record vanished. Such a record is settled, so
     * no holder is overwritten.
     */
    FAIL("fail", DedupStatus.FAILED),
    /** A longer lease for a PROCESSING record. */
    RENEW("renew", null);

    private final String operation;
    private final @Nullable DedupStatus outcome;

    FencedUpdate(String operation, @Nullable DedupStatus outcome) {
      this.operation = operation;
      this.outcome = outcome;
    }

    /** The store operation, as its errors and logs name it. */
    public String operation() {
      return operation;
    }

    /**
     * The outcome this update writes, which is written again where the record vanished (a failover
     * to a standby that had not received it, a DELETE, a purge); null for a renewal.
     */
    public @Nullable DedupStatus outcome() {
      return outcome;
    }
  }

  /**
   * What a fenced update did.
   *
   * @param lost the keys whose lease was lost: another claim holds them, or (renewal) their record
   *     is gone
   * @param rewritten the claims whose record had vanished and whose outcome was written again
   */
  protected record Written(List<DedupKey> lost, List<ClaimResult.Claimed> rewritten) {}

  /** How the statements are prepared: the call's timeouts, unnamed behind a pooler. */
  protected final StoreCalls calls;

  /** The store's logger, where users look for what it did. */
  protected final Logger log;

  private final String schemaResource;
  private final PurgeSql purgeSql;
  private final AdminSql adminSql;
  private final RecordSql recordSql;

  /**
   * The statements on one claim's record that differ between dialects only in their text.
   *
   * @param find selects one record's columns as {@code Dialect#record} reads them, binding (type,
   *     key)
   * @param failInTransaction marks FAILED a key claimed in the caller's transaction (written
   *     SUCCESS there) whose handler threw, by (error, type, key, attempts, claim id): in that same
   *     transaction, so that it stays as written only if the caller commits anyway
   */
  protected record RecordSql(String find, String failInTransaction) {}

  /**
   * @param schemaResource the schema file that creates the table in this dialect, on the classpath
   * @param purgeSql the retention purge's statements in this dialect
   * @param adminSql the admin operations' statements in this dialect
   * @param recordSql the statements on one record in this dialect
   */
  protected Dialect(
      StoreCalls calls,
      Logger log,
      String schemaResource,
      PurgeSql purgeSql,
      AdminSql adminSql,
      RecordSql recordSql) {
    this.calls = calls;
    this.log = log;
    this.schemaResource = schemaResource;
    this.purgeSql = purgeSql;
    this.adminSql = adminSql;
    this.recordSql = recordSql;
  }

  /**
   * Runs {@code work} in a transaction of its own on an auto-commit connection, as {@link
   * StoreCalls#inOwnTransaction} does.
   */
  public <T> T inOwnTransaction(Connection connection, StoreCalls.SqlWork<T> work)
      throws SQLException {
    return StoreCalls.inOwnTransaction(connection, work);
  }

  /**
   * Claims {@code requests} (distinct keys): one answer per request, in their order. In its own
   * transaction when the connection is in auto-commit mode, else in the caller's (never committed).
   *
   * @param withLease claim as PROCESSING under the request's lease (separate mode), or as SUCCESS
   *     at once (in the caller's transaction)
   */
  public abstract List<ClaimResult> claim(
      Connection connection, List<ClaimRequest> requests, boolean withLease) throws SQLException;

  /**
   * Claims {@code request} under its lease and marks the claims of {@code completing} SUCCESS, kept
   * for {@code retention}, in one commit (see {@link DedupStore#claimCompleting}). By default in a
   * transaction of its own: the fenced completion (as {@link #update} writes it), then the claim.
   */
  public DedupStore.ClaimCompleting claimCompleting(
      Connection connection,
      ClaimRequest request,
      List<ClaimResult.Claimed> completing,
      Duration retention)
      throws SQLException {
    return inOwnTransaction(
        connection,
        c -> {
          List<DedupKey> lost = update(c, FencedUpdate.COMPLETE, completing, retention, null);
          return new DedupStore.ClaimCompleting(claim(c, List.of(request), true).get(0), lost);
        });
  }

  /**
   * Applies {@code update} where the claim still holds the key, binding {@code duration} (the
   * retention, or the lease of a renewal) and, for a failure, the {@code errors} in the order of
   * {@code claims}. Where a key has no record at all and the update writes an outcome, writes it
   * again, unless a claim has created the key anew meanwhile, and says so.
   *
   * @return the keys whose lease was lost
   */
  public final List<DedupKey> update(
      Connection connection,
      FencedUpdate update,
      List<ClaimResult.Claimed> claims,
      Duration duration,
      @Nullable List<String> errors)
      throws SQLException {
    Written written = write(connection, update, claims, duration, errors);
    DedupStatus status = update.outcome();
    for (ClaimResult.Claimed claim : written.rewritten()) {
      log.warn(
          "The record of {} had vanished when attempt {} came to record its {} (a failover to a"
              + " standby that had not received it, a DELETE, a purge): not a takeover, no other"
              + " consumer holds the key. Wrote the {} again under attempt {}, so a redelivery"
              + " finds it",
          claim.key(),
          claim.token(),
          status,
          status,
          claim.token());
    }
    return written.lost();
  }

  /** {@link #update} in this dialect, without the log. */
  protected abstract Written write(
      Connection connection,
      FencedUpdate update,
      List<ClaimResult.Claimed> claims,
      Duration duration,
      @Nullable List<String> errors)
      throws SQLException;

  /**
   * Gives back claims whose handler never ran, without counting an attempt; answers the keys it
   * could not release (the claim no longer holds them).
   */
  public abstract List<DedupKey> release(Connection connection, List<ClaimResult.Claimed> claims)
      throws SQLException;

  /**
   * Marks FAILED, in the caller's transaction, a claim made in it whose handler threw (see {@link
   * RecordSql#failInTransaction}); whether its row was found.
   */
  public final boolean failInTransaction(
      Connection connection, ClaimResult.Claimed claim, String error) throws SQLException {
    try (PreparedStatement update = calls.prepare(connection, recordSql.failInTransaction())) {
      setError(update, 1, StoredText.storable(error, StoredText.MAX_ERROR_LENGTH));
      update.setString(2, claim.key().bizType());
      update.setString(3, claim.key().bizKey());
      update.setInt(4, claim.token());
      update.setString(5, claim.claimId());
      return update.executeUpdate() == 1;
    }
  }

  /**
   * Binds the error of a FAILED record where this dialect's statements take it (see {@link
   * RecordSql#failInTransaction}), an admin release's note as well ({@link AdminSql#release}); as
   * text by default.
   */
  public void setError(PreparedStatement statement, int index, @Nullable String error)
      throws SQLException {
    statement.setString(index, error);
  }

  /**
   * Whether the open transaction still holds the record that a claim in it wrote (see {@link
   * io.consumerdedup.core.DedupStore#heldInTransaction}). True by default: PostgreSQL keeps a
   * transaction aborted after a failed statement, and its commit is refused ({@link
   * AbortedTransactions}).
   */
  public boolean heldInTransaction(Connection connection, ClaimResult.Claimed claim)
      throws SQLException {
    return true;
  }

  /** The record of {@code key}, if any. */
  public @Nullable DedupRecord find(Connection connection, DedupKey key) throws SQLException {
    try (PreparedStatement statement = calls.prepare(connection, recordSql.find())) {
      statement.setString(1, key.bizType());
      statement.setString(2, key.bizKey());
      try (ResultSet row = statement.executeQuery()) {
        return row.next() ? recordAsStored(row, key) : null;
      }
    }
  }

  /**
   * Binds {@code key}'s columns (type, key) to parameters {@code index} and {@code index + 1} of an
   * operator's statement on that one key (see {@link AdminSql}), so that it names the row a claim
   * of the key wrote; as text by default, as the claims bind it.
   */
  public void bindKey(Connection connection, PreparedStatement statement, int index, DedupKey key)
      throws SQLException {
    statement.setString(index, key.bizType());
    statement.setString(index + 1, key.bizKey());
  }

  /**
   * Deletes up to {@code limit} expired records, oldest first, skipping the rows other transactions
   * hold (a claim, a mode TRANSACTIONAL handler's transaction, another janitor); answers how many.
   */
  public abstract int purge(Connection connection, int limit) throws SQLException;

  /**
   * The text to prepare for {@code statementSql}, a statement of the retention purge ({@link
   * #purge}, {@link #deleteExpired}, the backlog of {@link PurgeSql}), so that the database reads
   * the table along its {@code created_at} index whatever it knows of the table; run it with {@link
   * #executePurge}. Here the statement as it is.
   */
  public String purgeText(String statementSql) {
    return statementSql;
  }

  /**
   * Executes a statement prepared from {@link #purgeText} and leaves it on the purge statement's
   * own result (its result set or its update count); answers whether that is a result set.
   */
  public boolean executePurge(PreparedStatement statement) throws SQLException {
    return statement.execute();
  }

  /**
   * Deletes up to {@code limit} expired records after the keyset position {@code after} (from the
   * oldest when null), skipping the rows other transactions hold, as {@link #purge} does; with a
   * {@code shortestRetention}, only among rows created before the horizon it sets (see {@link
   * PurgeSql}).
   */
  public abstract KeysetPurge.Batch deleteExpired(
      Connection connection,
      KeysetPurge.@Nullable Position after,
      @Nullable Duration shortestRetention,
      int limit)
      throws SQLException;

  /**
   * Binds the horizon's {@code shortestRetention} in milliseconds and the keyset position {@code
   * after}, each if any, from parameter 1 as {@link PurgeSql} reads them; answers the next
   * parameter's index.
   */
  protected final int bindRange(
      PreparedStatement statement,
      @Nullable Duration shortestRetention,
      KeysetPurge.@Nullable Position after)
      throws SQLException {
    int index = 1;
    if (shortestRetention != null) {
      statement.setLong(index++, shortestRetention.toMillis());
    }
    if (after != null) {
      Object createdAt = time(after.createdAt());
      statement.setObject(index++, createdAt);
      statement.setObject(index++, createdAt);
      statement.setObject(index++, createdAt);
      bindKeyColumn(statement, index++, after.bizType());
      bindKeyColumn(statement, index++, after.bizType());
      bindKeyColumn(statement, index++, after.bizKey());
    }
    return index;
  }

  /**
   * A key column of the current row as the retention purge carries it from its read to its next
   * statements ({@link #bindKeyColumn}), which must name the same row; as text by default.
   */
  protected String keyColumn(ResultSet row, String column) throws SQLException {
    return row.getString(column);
  }

  /** Binds a key column that {@link #keyColumn} read. */
  protected void bindKeyColumn(PreparedStatement statement, int index, String value)
      throws SQLException {
    statement.setString(index, value);
  }

  /** The retention purge's statements in this dialect. */
  public final PurgeSql purgeSql() {
    return purgeSql;
  }

  /** The admin operations' statements in this dialect. */
  public final AdminSql adminSql() {
    return adminSql;
  }

  /** The names of the table's columns, in lower case; none if there is no such table. */
  public abstract Set<String> columns(Connection connection) throws SQLException;

  /**
   * What to change in how the table is stored, for a table made from an earlier schema file that
   * works but slower, or by hand with columns that compare otherwise than the schema file's; null
   * when nothing. Read with the columns at start-up.
   */
  public @Nullable String storageAdvice(Connection connection) throws SQLException {
    return null;
  }

  /**
   * The schemas (MySQL: databases) other than the one the store looks in that hold a table of the
   * dedup table's name, for the error of a missing table: one created under another schema looks
   * absent, and creating the table again would split the keys between two tables. None by default.
   */
  public List<String> schemasHoldingTable(Connection connection) throws SQLException {
    return List.of();
  }

  /** What the database calls the namespace of {@link #schemasHoldingTable}, in its errors. */
  public String schemaWord() {
    return "schema";
  }

  /** Whether {@code connection} reaches the database through a connection pooler. */
  public abstract boolean behindPooler(Connection connection) throws SQLException;

  /** The schema file that creates the table, on the classpath. */
  public final String schemaResource() {
    return schemaResource;
  }

  /** The command line client that applies a schema file read from its standard input. */
  public abstract String schemaClient();

  /** The type of the {@code claim_id} column, for an ALTER TABLE that adds it. */
  public abstract String claimIdColumnType();

  /** The time in a column of the current row; null when the column is. */
  public abstract @Nullable Instant instant(ResultSet row, String column) throws SQLException;

  /** A time as the driver binds it into a time column of this dialect. */
  public abstract Object time(Instant instant);

  /**
   * The record of {@code key} in the current row of a statement that selects its columns, as
   * stored: a status a newer version wrote (a rolling upgrade) is read as {@link
   * DedupStatus#UNKNOWN} with its text. The one mapping of a stored status, for a claim and a find
   * as for an operator: a claim that threw on such a row failed every key of its batch, and its
   * record was retried and dead-lettered as a handler failure.
   */
  public final DedupRecord recordAsStored(ResultSet row, DedupKey key) throws SQLException {
    return record(row, key, DedupStatus.ofStored(row.getString("status")));
  }

  /** {@link #recordAsStored(ResultSet, DedupKey)} of a statement that selects the key too. */
  public final DedupRecord recordAsStored(ResultSet row) throws SQLException {
    return recordAsStored(row, new DedupKey(row.getString("biz_type"), row.getString("biz_key")));
  }

  private DedupRecord record(ResultSet row, DedupKey key, DedupStatus status) throws SQLException {
    return new DedupRecord(
        key,
        status,
        row.getString("status"),
        row.getInt("attempts"),
        row.getString("owner"),
        instant(row, "lease_until"),
        row.getString("fingerprint"),
        row.getString("last_error"),
        row.getString("source"),
        Objects.requireNonNull(instant(row, "created_at")),
        Objects.requireNonNull(instant(row, "updated_at")),
        Objects.requireNonNull(instant(row, "expires_at")),
        row.getBoolean("lease_live"));
  }
}
