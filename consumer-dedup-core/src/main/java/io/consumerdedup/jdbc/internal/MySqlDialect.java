package io.consumerdedup.jdbc.internal;

import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.core.internal.StoredText;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;

/**
 * The store on MySQL and MariaDB ({@link MySqlSql}): no arrays and no {@code RETURNING}, so a
 * batch's keys go one statement per key, or in one statement of many rows, in one transaction.
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
public final class MySqlDialect extends Dialect {

  private final String table;
  private final MySqlSql sql;

  public MySqlDialect(StoreCalls calls, String table, String schemaResource, Logger log) {
    this(calls, table, schemaResource, log, new MySqlSql(table));
  }

  private MySqlDialect(
      StoreCalls calls, String table, String schemaResource, Logger log, MySqlSql sql) {
    super(
        calls,
        log,
        schemaResource,
        new PurgeSql(table, false),
        new AdminSql(table, MySqlSql.NOW, MySqlSql.NOW_PLUS_MS, MySqlSql.ERROR_TEXT),
        new RecordSql(sql.find, sql.failInTransaction));
    this.table = table;
    this.sql = sql;
  }

  /**
   * Claims {@code requests} (distinct keys). In its own transaction when the connection is in
   * auto-commit mode, else in the caller's (which it never commits), under a savepoint: a claim
   * that fails after some of its statements wrote leaves none of its rows there, where PostgreSQL's
   * one statement fails whole.
   */
  @Override
  public List<ClaimResult> claim(
      Connection connection, List<ClaimRequest> requests, boolean withLease) throws SQLException {
    if (!connection.getAutoCommit()) {
      return StoreCalls.underSavepoint(connection, c -> claimLocked(c, requests, withLease));
    }
    Map<DedupKey, ClaimResult> settled = withLease ? settledByRead(connection, requests) : Map.of();
    List<ClaimRequest> open = requests.stream().filter(r -> !settled.containsKey(r.key())).toList();
    if (open.isEmpty()) {
      return requests.stream().map(r -> settled.get(r.key())).toList();
    }
    List<ClaimResult> claimed =
        StoreCalls.inOwnTransaction(connection, c -> claimLocked(c, open, withLease));
    if (settled.isEmpty()) {
      return claimed;
    }
    Map<DedupKey, ClaimResult> answers = new HashMap<>(settled);
    for (int i = 0; i < open.size(); i++) {
      answers.put(open.get(i).key(), claimed.get(i));
    }
    return requests.stream().map(r -> answers.get(r.key())).toList();
  }

  /**
   * The answers that the keys' records settle (SUCCESS, another holder's live lease, another
   * payload), from a plain read that takes no lock: a duplicate is one read, where the claim would
   * lock its row and commit. The rest are claimed under locks ({@link #claimLocked}), which judge
   * them again. A record that is the request's own claim (an earlier try committed and its reply
   * was lost) is left to the claim too.
   */
  private Map<DedupKey, ClaimResult> settledByRead(
      Connection connection, List<ClaimRequest> requests) throws SQLException {
    Map<Map.Entry<String, String>, ClaimRequest> byKey = byColumns(requests);
    Map<DedupKey, ClaimResult> settled = new HashMap<>();
    for (List<ClaimRequest> chunk : chunks(requests)) {
      try (PreparedStatement select = calls.prepare(connection, sql.find(chunk.size()))) {
        bindKeys(select, chunk);
        try (ResultSet row = select.executeQuery()) {
          while (row.next()) {
            ClaimRequest request =
                byKey.get(Map.entry(row.getString("biz_type"), row.getString("biz_key")));
            if (request == null) {
              continue;
            }
            DedupRecord existing = recordAsStored(row, request.key());
            boolean own =
                existing.status() == DedupStatus.PROCESSING
                    && request.claimId().equals(row.getString("claim_id"))
                    && !otherPayload(existing, request);
            if (!own && !claimable(existing, request)) {
              settled.put(request.key(), new ClaimResult.Taken(request.key(), existing));
            }
          }
        }
      }
    }
    return settled;
  }

  /**
   * Most keys one statement of a claim names. The server's work on a statement that names many keys
   * grows faster than their number (a plain read of 4,000 keys took 1.7 s, of 10,000 longer than
   * the statement timeout, at every try): a large poll's claim goes in statements of this many
   * keys, in key order, so that it still locks its rows in the order every claim does.
   */
  static final int CLAIM_CHUNK = 500;

  /** {@code requests} in consecutive lists of at most {@link #CLAIM_CHUNK}. */
  /** The requests by the key columns a row of theirs holds. */
  private static Map<Map.Entry<String, String>, ClaimRequest> byColumns(
      List<ClaimRequest> requests) {
    Map<Map.Entry<String, String>, ClaimRequest> byKey = new HashMap<>();
    requests.forEach(r -> byKey.put(Map.entry(r.key().bizType(), r.key().bizKey()), r));
    return byKey;
  }

  /** Binds the key columns of each request, in order, to a read naming them. */
  private static void bindKeys(PreparedStatement statement, List<ClaimRequest> requests)
      throws SQLException {
    int index = 1;
    for (ClaimRequest request : requests) {
      statement.setString(index++, request.key().bizType());
      statement.setString(index++, request.key().bizKey());
    }
  }

  private static List<List<ClaimRequest>> chunks(List<ClaimRequest> requests) {
    List<List<ClaimRequest>> chunks = new ArrayList<>();
    for (int from = 0; from < requests.size(); from += CLAIM_CHUNK) {
      chunks.add(requests.subList(from, Math.min(requests.size(), from + CLAIM_CHUNK)));
    }
    return chunks;
  }

  private List<ClaimResult> claimLocked(
      Connection connection, List<ClaimRequest> requests, boolean withLease) throws SQLException {
    List<ClaimRequest> ordered =
        requests.stream().sorted(Comparator.comparing(ClaimRequest::key, KEY_ORDER)).toList();
    Map<Map.Entry<String, String>, ClaimRequest> byKey = byColumns(ordered);
    Map<Map.Entry<String, String>, ResultRow> rows = new HashMap<>();
    for (List<ClaimRequest> chunk : chunks(ordered)) {
      lockOrInsert(connection, chunk, withLease);
      try (PreparedStatement select = calls.prepare(connection, sql.findLocked(chunk.size()))) {
        bindKeys(select, chunk);
        try (ResultSet row = select.executeQuery()) {
          while (row.next()) {
            Map.Entry<String, String> columns =
                Map.entry(row.getString("biz_type"), row.getString("biz_key"));
            ClaimRequest request = byKey.get(columns);
            if (request != null) {
              rows.put(
                  columns,
                  new ResultRow(recordAsStored(row, request.key()), row.getString("claim_id")));
            }
          }
        }
      }
    }
    List<ClaimResult> results = new ArrayList<>(requests.size());
    for (ClaimRequest request : requests) {
      ResultRow row = rows.get(Map.entry(request.key().bizType(), request.key().bizKey()));
      if (row == null) {
        String charset = nonUnicodeCharset(connection);
        throw new DedupStoreException(
            "The dedup table did not return the row of "
                + request.key()
                + " that the claim had just locked: "
                + (charset == null
                    ? "its key columns must compare byte for byte (VARBINARY, as in "
                        + schemaResource()
                        + ")"
                    : connectionCharsetProblem(charset)),
            request.key(),
            request.source(),
            null);
      }
      results.add(answer(connection, request, row, withLease));
    }
    return results;
  }

  /**
   * Inserts or locks the rows of {@code ordered} (in key order), as {@link MySqlSql#lockOrInsert}.
   */
  private void lockOrInsert(Connection connection, List<ClaimRequest> ordered, boolean withLease)
      throws SQLException {
    try (PreparedStatement insert =
        calls.prepare(connection, sql.lockOrInsert(ordered.size(), withLease))) {
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
  }

  private ClaimResult answer(
      Connection connection, ClaimRequest request, ResultRow row, boolean withLease)
      throws SQLException {
    DedupRecord existing = row.record;
    DedupStatus claimedStatus = withLease ? DedupStatus.PROCESSING : DedupStatus.SUCCESS;
    if (request.claimId().equals(row.claimId)
        && existing.status() == claimedStatus
        && !otherPayload(existing, request)) {
      // Inserted by this statement, or by an earlier try of this claim whose reply was lost (its
      // lease renewed by the statement that locked it).
      return new ClaimResult.Claimed(request.key(), existing.attempts(), request.claimId());
    }
    if (!claimable(existing, request)) {
      return new ClaimResult.Taken(request.key(), existing);
    }
    try (PreparedStatement update = calls.prepare(connection, sql.takeOver(withLease))) {
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

  /** Whether the record was claimed for another payload than the request's. */
  private static boolean otherPayload(DedupRecord existing, ClaimRequest request) {
    String stored = existing.fingerprint().orElse(null);
    return stored != null && request.fingerprint() != null && !stored.equals(request.fingerprint());
  }

  /**
   * A FAILED attempt or an expired lease, with no other payload: the next claim takes it. Never a
   * status a newer version wrote: what it means is that version's to say.
   */
  private static boolean claimable(DedupRecord existing, ClaimRequest request) {
    if (otherPayload(existing, request)) {
      return false;
    }
    return existing.status() == DedupStatus.FAILED
        || (existing.status() == DedupStatus.PROCESSING && !existing.isLeaseLive());
  }

  private static long keep(ClaimRequest request, boolean withLease) {
    return (withLease ? request.lease().plus(request.retention()) : request.retention()).toMillis();
  }

  /**
   * One fenced statement per key (MySQL has no arrays to send a batch's keys in one), in one
   * transaction: one commit for the batch, rows locked in key order as a claim locks them. Sent
   * again after a failure, each statement still counts its own earlier write as written.
   */
  @Override
  protected Written write(
      Connection connection,
      FencedUpdate update,
      List<ClaimResult.Claimed> claims,
      Duration duration,
      @Nullable List<String> errors)
      throws SQLException {
    StoreCalls.SqlWork<Written> perKey =
        c -> {
          Map<DedupKey, @Nullable String> messages = new HashMap<>();
          Iterator<String> error = errors == null ? null : errors.iterator();
          for (ClaimResult.Claimed claim : claims) {
            messages.put(
                claim.key(),
                error == null
                    ? null
                    : StoredText.storable(error.next(), StoredText.MAX_ERROR_LENGTH));
          }
          Set<DedupKey> lost = new HashSet<>();
          List<ClaimResult.Claimed> rewritten = new ArrayList<>();
          for (ClaimResult.Claimed claim :
              claims.stream()
                  .sorted(Comparator.comparing(ClaimResult.Claimed::key, KEY_ORDER))
                  .toList()) {
            String message = messages.get(claim.key());
            if (fenced(c, update, claim, duration.toMillis(), message)) {
              continue;
            }
            if (update.outcome() == null) {
              lost.add(claim.key());
            } else if (writeVanished(c, update, claim, duration.toMillis(), message)) {
              rewritten.add(claim);
            } else if (!fenced(c, update, claim, duration.toMillis(), message)) {
              // Asked again: the row the insert met may be this very outcome, written again by
              // another thread of the holder that found no record at the same moment (the outcome
              // writer and a redelivery's claim both writing a kept outcome). Taken for a claim
              // anew, it had the holder report its own outcome as a lease taken over.
              lost.add(claim.key());
            }
          }
          return new Written(
              claims.stream().map(ClaimResult.Claimed::key).filter(lost::contains).toList(),
              rewritten);
        };
    // In a transaction already (a claim's, see claimCompleting), its commit is theirs.
    return claims.size() == 1 || !connection.getAutoCommit()
        ? perKey.run(connection)
        : StoreCalls.inOwnTransaction(connection, perKey);
  }

  /**
   * A fenced update of one key: true if the claim still held the key. The statement always moves
   * {@code updated_at}, so the count is the same whether the driver reports found or changed rows.
   */
  private boolean fenced(
      Connection connection,
      FencedUpdate update,
      ClaimResult.Claimed claim,
      long durationMillis,
      @Nullable String error)
      throws SQLException {
    String statementSql =
        switch (update) {
          case COMPLETE -> sql.complete;
          case FAIL -> sql.fail;
          case RENEW -> sql.renew;
        };
    try (PreparedStatement statement = calls.prepare(connection, statementSql)) {
      int index = 1;
      if (update == FencedUpdate.FAIL) {
        setError(statement, index++, error);
      }
      statement.setLong(index++, durationMillis);
      if (update == FencedUpdate.COMPLETE) {
        statement.setString(index++, claim.claimId());
      }
      statement.setString(index++, claim.key().bizType());
      statement.setString(index++, claim.key().bizKey());
      statement.setInt(index++, claim.token());
      statement.setString(index++, claim.claimId());
      if (update == FencedUpdate.COMPLETE) {
        // The claim whose lease a takeover given back unrun noted (MySqlSql#complete).
        statement.setString(index, claim.claimId());
      }
      return statement.executeUpdate() == 1;
    }
  }

  /**
   * Writes the outcome of {@code update} (complete or fail) again for a key that has no record at
   * all; true if it was written, false if a record exists.
   */
  private boolean writeVanished(
      Connection connection,
      FencedUpdate update,
      ClaimResult.Claimed claim,
      long retentionMillis,
      @Nullable String error)
      throws SQLException {
    boolean failed = update == FencedUpdate.FAIL;
    try (PreparedStatement insert =
        calls.prepare(connection, failed ? sql.failVanished : sql.completeVanished)) {
      int index = 1;
      insert.setString(index++, claim.key().bizType());
      insert.setString(index++, claim.key().bizKey());
      insert.setInt(index++, claim.token());
      insert.setString(index++, claim.claimId());
      if (failed) {
        setError(insert, index++, error);
      }
      insert.setLong(index, retentionMillis);
      return insert.executeUpdate() == 1;
    }
  }

  /**
   * InnoDB rolls the whole transaction back at a deadlock (1213), and at a lock wait timeout under
   * {@code innodb_rollback_on_timeout}, and the connection's next statement opens a new one: a
   * handler that caught the error and went on committed its later writes, while the claim's record
   * was gone. Read in the transaction, the record is there with this claim's id only if the
   * transaction that wrote it is still open (or, for a claim sent again, committed already).
   */
  @Override
  public boolean heldInTransaction(Connection connection, ClaimResult.Claimed claim)
      throws SQLException {
    try (PreparedStatement select = calls.prepare(connection, sql.find)) {
      select.setString(1, claim.key().bizType());
      select.setString(2, claim.key().bizKey());
      try (ResultSet row = select.executeQuery()) {
        return row.next() && claim.claimId().equals(row.getString("claim_id"));
      }
    }
  }

  @Override
  public List<DedupKey> release(Connection connection, List<ClaimResult.Claimed> claims)
      throws SQLException {
    List<DedupKey> kept = new ArrayList<>();
    for (ClaimResult.Claimed claim : claims) {
      if (!release(connection, claim)) {
        kept.add(claim.key());
      }
    }
    return kept;
  }

  /** Gives back one claim whose handler never ran; true if it was released. */
  private boolean release(Connection connection, ClaimResult.Claimed claim) throws SQLException {
    for (String statementSql : List.of(sql.releaseDelete, sql.releaseRestore)) {
      try (PreparedStatement statement = calls.prepare(connection, statementSql)) {
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

  /** As its UTF-8 bytes, which {@link MySqlSql#ERROR_TEXT} reads as utf8mb4. */
  @Override
  public void setError(PreparedStatement statement, int index, @Nullable String error)
      throws SQLException {
    statement.setBytes(
        index, error == null ? null : error.getBytes(java.nio.charset.StandardCharsets.UTF_8));
  }

  /** The oldest expired rows, as a batch of the janitor from the start of the table. */
  @Override
  public int purge(Connection connection, int limit) throws SQLException {
    return deleteExpired(connection, null, null, limit).deleted();
  }

  /**
   * MySQL deletes with ORDER BY but answers no rows and skips no locks: the batch's positions are
   * read first, without a lock; then, in one transaction, those rows still expired are locked one
   * primary key at a time, skipping any another transaction holds ({@link PurgeSql#lockExpired}),
   * and deleted one by one. A handler's transaction that holds one of them (mode TRANSACTIONAL)
   * neither stops the purge nor is waited for, and no row outside the batch is locked.
   */
  @Override
  public KeysetPurge.Batch deleteExpired(
      Connection connection,
      KeysetPurge.@Nullable Position after,
      @Nullable Duration shortestRetention,
      int limit)
      throws SQLException {
    List<KeysetPurge.Position> found = new ArrayList<>();
    try (PreparedStatement select =
        calls.prepare(
            connection, purgeSql().selectBatch(after != null, shortestRetention != null))) {
      int index = bindRange(select, shortestRetention, after);
      select.setInt(index, limit);
      try (ResultSet rows = select.executeQuery()) {
        while (rows.next()) {
          found.add(
              new KeysetPurge.Position(
                  Objects.requireNonNull(instant(rows, "created_at")),
                  keyColumn(rows, "biz_type"),
                  keyColumn(rows, "biz_key")));
        }
      }
    }
    if (found.isEmpty()) {
      return new KeysetPurge.Batch(0, false, after);
    }
    int deleted =
        connection.getAutoCommit()
            ? StoreCalls.inOwnTransaction(connection, c -> deleteStillExpired(c, found))
            : deleteStillExpired(connection, found);
    return new KeysetPurge.Batch(deleted, found.size() >= limit, found.get(found.size() - 1));
  }

  /**
   * The column's bytes as stored, one character each (ISO-8859-1 maps every byte to the character
   * of its value), whatever they encode: a key that a connection in a single-byte character set
   * wrote is no UTF-8, and read as text through a UTF-8 connection it came back as other bytes,
   * which named no row, so the purge never deleted it.
   */
  @Override
  protected String keyColumn(ResultSet row, String column) throws SQLException {
    return new String(row.getBytes(column), java.nio.charset.StandardCharsets.ISO_8859_1);
  }

  /** The bytes that {@link #keyColumn} read. */
  @Override
  protected void bindKeyColumn(PreparedStatement statement, int index, String value)
      throws SQLException {
    statement.setBytes(index, value.getBytes(java.nio.charset.StandardCharsets.ISO_8859_1));
  }

  /** Most rows one locking read of the purge names: two parameters each, far below the limit. */
  private static final int LOCK_CHUNK = 500;

  /** Locks the rows of {@code found} that are still expired and free, and deletes them. */
  private int deleteStillExpired(Connection connection, List<KeysetPurge.Position> found)
      throws SQLException {
    List<Map.Entry<String, String>> locked = new ArrayList<>();
    for (int from = 0; from < found.size(); from += LOCK_CHUNK) {
      List<KeysetPurge.Position> chunk =
          found.subList(from, Math.min(found.size(), from + LOCK_CHUNK));
      try (PreparedStatement lock =
          calls.prepare(connection, purgeSql().lockExpired(chunk.size()))) {
        int index = 1;
        for (KeysetPurge.Position position : chunk) {
          bindKeyColumn(lock, index++, position.bizType());
          bindKeyColumn(lock, index++, position.bizKey());
        }
        try (ResultSet rows = lock.executeQuery()) {
          while (rows.next()) {
            locked.add(Map.entry(keyColumn(rows, "biz_type"), keyColumn(rows, "biz_key")));
          }
        }
      }
    }
    if (locked.isEmpty()) {
      return 0;
    }
    try (PreparedStatement delete = calls.prepare(connection, purgeSql().deleteLocked())) {
      for (Map.Entry<String, String> row : locked) {
        bindKeyColumn(delete, 1, row.getKey());
        bindKeyColumn(delete, 2, row.getValue());
        delete.addBatch();
      }
      int deleted = 0;
      for (int count : delete.executeBatch()) {
        // A driver may answer SUCCESS_NO_INFO (-2) for a statement of a batch: the row is ours.
        deleted += count == Statement.SUCCESS_NO_INFO ? 1 : count;
      }
      return deleted;
    }
  }

  /** The table's columns, by schema (the current database when unqualified) and name. */
  @Override
  public Set<String> columns(Connection connection) throws SQLException {
    int dot = table.indexOf('.');
    Set<String> names = new HashSet<>();
    try (PreparedStatement statement = calls.prepare(connection, sql.columns)) {
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

  /**
   * Key columns that are not VARBINARY, as a table written by hand or by an ORM has them: their
   * collation takes keys that differ in case, accents or trailing spaces for one row, and the claim
   * of the second such key fails (see {@link #claimLocked}) where it should have run its handler.
   * And a connection that sends text in a character set that cannot hold every key, whose claims of
   * such keys fail likewise.
   */
  @Override
  public @Nullable String storageAdvice(Connection connection) throws SQLException {
    int dot = table.indexOf('.');
    List<String> textColumns = new ArrayList<>();
    try (PreparedStatement statement = calls.prepare(connection, MySqlSql.KEY_COLUMN_TYPES)) {
      statement.setString(1, dot < 0 ? null : table.substring(0, dot));
      statement.setString(2, dot < 0 ? table : table.substring(dot + 1));
      try (ResultSet rows = statement.executeQuery()) {
        while (rows.next()) {
          String type = rows.getString("data_type").toLowerCase(Locale.ROOT);
          if (!type.equals("varbinary")) {
            textColumns.add(
                rows.getString("column_name").toLowerCase(Locale.ROOT)
                    + " "
                    + type
                    + (rows.getString("collation_name") == null
                        ? ""
                        : " " + rows.getString("collation_name")));
          }
        }
      }
    }
    String charset = nonUnicodeCharset(connection);
    String charsetAdvice =
        charset == null
            ? null
            : "The connection to the dedup table "
                + table
                + " sends text as "
                + charset
                + ": "
                + connectionCharsetProblem(charset)
                + ".";
    if (textColumns.isEmpty()) {
      return charsetAdvice;
    }
    return (charsetAdvice == null ? "" : charsetAdvice + " ")
        + "The dedup table "
        + table
        + " compares its keys as text ("
        + String.join(", ", textColumns)
        + "): keys that differ only in case, accents or trailing spaces are one row to it, and the"
        + " claim of the second such key fails instead of running its handler. The schema file "
        + schemaResource()
        + " stores them as bytes: ALTER TABLE "
        + table
        + " MODIFY biz_type VARBINARY(256) NOT NULL, MODIFY biz_key VARBINARY(1024) NOT NULL";
  }

  /**
   * Text whose UTF-8 bytes {@link #nonUnicodeCharset} expects at the server: Cyrillic, an emoji.
   */
  private static final String CHARSET_PROBE = "Я\uD83E\uDD84";

  private static final String CHARSET_PROBE_HEX =
      java.util.HexFormat.of()
          .withUpperCase()
          .formatHex(CHARSET_PROBE.getBytes(java.nio.charset.StandardCharsets.UTF_8));

  /**
   * The character set in which the connection sends text (MySQL Connector/J's {@code
   * characterEncoding}), if a key reaches the key columns as other bytes than its UTF-8 ones; null
   * when it reaches them whole. Asked of the server with a bound key-like text, since the driver's
   * encoding, not the session's character set, decides: a {@code SET NAMES latin1} alone leaves the
   * driver's UTF-8 bytes as they are, and the key columns take them as they come.
   */
  private @Nullable String nonUnicodeCharset(Connection connection) throws SQLException {
    try (PreparedStatement statement = calls.prepare(connection, MySqlSql.CLIENT_CHARSET)) {
      statement.setString(1, CHARSET_PROBE);
      try (ResultSet row = statement.executeQuery()) {
        if (!row.next() || CHARSET_PROBE_HEX.equalsIgnoreCase(row.getString(1))) {
          return null;
        }
        return String.valueOf(row.getString(2));
      }
    }
  }

  /**
   * As text where the connection sends the key whole, as the claims made through it bind it; as its
   * UTF-8 bytes where it does not. A connection that sends a single-byte character set (see {@link
   * #nonUnicodeCharset}) writes a character it lacks as {@code ?}: an operator looking up such a
   * key, which only a consumer whose connection sends UTF-8 can have claimed, was told there is no
   * record, and a release or a forget of it changed the record of a key of question marks, if there
   * was one.
   */
  @Override
  public void bindKey(Connection connection, PreparedStatement statement, int index, DedupKey key)
      throws SQLException {
    if (sentWhole(connection, key.bizType() + key.bizKey())) {
      super.bindKey(connection, statement, index, key);
      return;
    }
    statement.setBytes(index, key.bizType().getBytes(java.nio.charset.StandardCharsets.UTF_8));
    statement.setBytes(index + 1, key.bizKey().getBytes(java.nio.charset.StandardCharsets.UTF_8));
  }

  /** Whether {@code text}, bound as text, reaches the server as the same text. */
  private boolean sentWhole(Connection connection, String text) throws SQLException {
    try (PreparedStatement statement = calls.prepare(connection, MySqlSql.ECHO)) {
      statement.setString(1, text);
      try (ResultSet row = statement.executeQuery()) {
        return row.next() && text.equals(row.getString(1));
      }
    }
  }

  /**
   * What a connection that sends text as {@code charset} does to keys: the driver writes a
   * character that {@code charset} lacks as {@code ?}, so the key the claim stored is not the key
   * it reads back, and every delivery of it fails, the record held, until the URL changes.
   */
  private static String connectionCharsetProblem(String charset) {
    return "the driver writes a character of a key that "
        + charset
        + " lacks (Cyrillic, Chinese, an emoji) as '?', so the claim of such a key fails and its"
        + " record waits, at every delivery. Remove characterEncoding from the JDBC URL (MySQL"
        + " Connector/J then sends utf8mb4) or set characterEncoding=UTF-8";
  }

  /** A database plays the part of PostgreSQL's schema: {@code database.table} names the table. */
  @Override
  public List<String> schemasHoldingTable(Connection connection) throws SQLException {
    int dot = table.indexOf('.');
    List<String> databases = new ArrayList<>();
    try (PreparedStatement statement = calls.prepare(connection, MySqlSql.DATABASES_WITH_TABLE)) {
      statement.setString(1, dot < 0 ? table : table.substring(dot + 1));
      statement.setString(2, dot < 0 ? null : table.substring(0, dot));
      try (ResultSet rows = statement.executeQuery()) {
        while (rows.next()) {
          databases.add(rows.getString(1));
        }
      }
    }
    return databases;
  }

  @Override
  public String schemaWord() {
    return "database";
  }

  @Override
  public boolean behindPooler(Connection connection) {
    return false;
  }

  @Override
  public String schemaClient() {
    return "mysql <database>";
  }

  @Override
  public String claimIdColumnType() {
    return "VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL";
  }

  /** A DATETIME(6) holding UTC wall-clock time, read as such whatever the time zones. */
  @Override
  public @Nullable Instant instant(ResultSet row, String column) throws SQLException {
    LocalDateTime value = row.getObject(column, LocalDateTime.class);
    return value == null ? null : value.toInstant(ZoneOffset.UTC);
  }

  @Override
  public Object time(Instant instant) {
    return LocalDateTime.ofInstant(instant, ZoneOffset.UTC);
  }

  private record ResultRow(DedupRecord record, @Nullable String claimId) {
    ResultRow {
      Objects.requireNonNull(record);
    }
  }
}
