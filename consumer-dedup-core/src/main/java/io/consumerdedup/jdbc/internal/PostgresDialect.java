package io.consumerdedup.jdbc.internal;

import static io.consumerdedup.jdbc.internal.PostgresSql.Type.BIGINT;
import static io.consumerdedup.jdbc.internal.PostgresSql.Type.INT;
import static io.consumerdedup.jdbc.internal.PostgresSql.Type.TEXT;

import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.core.internal.StoredText;
import java.sql.Array;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Timestamp;
import java.time.Duration;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.function.Function;
import java.util.stream.Collectors;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;

/**
 * The store on PostgreSQL: each operation is one statement for all its keys ({@link PostgresSql}),
 * keys bound as arrays, answers read from {@code RETURNING}.
 */
public final class PostgresDialect extends Dialect {

  /** A claim whose key changes under it between two statements is tried again this many times. */
  private static final int MAX_CLAIM_ROUNDS = 10;

  private final String table;
  private final PostgresSql sql;

  public PostgresDialect(StoreCalls calls, String table, String schemaResource, Logger log) {
    this(calls, table, schemaResource, log, new PostgresSql(table));
  }

  private PostgresDialect(
      StoreCalls calls, String table, String schemaResource, Logger log, PostgresSql sql) {
    super(
        calls,
        log,
        schemaResource,
        new PurgeSql(table, true),
        new AdminSql(table, "now()", "now() + ? * interval '1 millisecond'", "?"),
        new RecordSql(sql.find, sql.failInTransaction));
    this.table = table;
    this.sql = sql;
  }

  /**
   * Claims {@code requests} (see {@link PostgresSql#claim}), again for the keys whose record
   * changed under the statement (between its snapshot and its insert), until every key has its
   * answer.
   */
  @Override
  public List<ClaimResult> claim(
      Connection connection, List<ClaimRequest> requests, boolean withLease) throws SQLException {
    if (withLease && requests.size() == 1) {
      ClaimResult settled = settledByRead(connection, requests.get(0));
      if (settled != null) {
        return List.of(settled);
      }
    }
    Map<DedupKey, ClaimResult> answers = new HashMap<>();
    List<ClaimRequest> open = requests;
    for (int round = 0; round < MAX_CLAIM_ROUNDS && !open.isEmpty(); round++) {
      List<ClaimRequest> unsettled = new ArrayList<>();
      Map<Map.Entry<String, String>, ClaimRequest> byKey = new HashMap<>();
      open.forEach(request -> byKey.put(columns(request.key()), request));
      PostgresSql.Keyed claimSql = withLease ? sql.claim : sql.claimInTransaction;
      try (PreparedStatement statement = calls.prepare(connection, claimSql.forRows(open.size()))) {
        bindClaims(new Rows<>(statement, 1, open), withLease);
        try (ResultSet rows = statement.executeQuery()) {
          while (rows.next()) {
            ClaimRequest request =
                byKey.get(Map.entry(rows.getString("biz_type"), rows.getString("biz_key")));
            ClaimResult answer = answer(rows, Objects.requireNonNull(request), withLease);
            if (answer == null) {
              unsettled.add(request);
            } else {
              answers.put(request.key(), answer);
            }
          }
        }
      }
      open = unsettled;
    }
    if (!open.isEmpty()) {
      throw new DedupStoreException(
          "Claim did not settle after " + MAX_CLAIM_ROUNDS + " rounds",
          open.get(0).key(),
          open.get(0).source(),
          null);
    }
    return requests.stream().map(request -> answers.get(request.key())).toList();
  }

  /**
   * The answer to a claim of one key that its record settles (SUCCESS, another holder's live lease,
   * another payload), from a plain read: a duplicate costs one index lookup that takes no lock and
   * writes nothing, where the claim statement would also set up its insert. Null when the key is
   * new or claimable, or the record is this request's own claim (an earlier try committed and its
   * reply was lost): the claim statement decides then. One key only: a record claimed one by one is
   * usually new, and this read is then one round trip more, which only the first record of a poll
   * pays (the others' claims carry the previous record's SUCCESS, {@link #claimCompleting}, and go
   * straight to the statement); a batch's statement answers settled keys from its snapshot anyway.
   */
  private @Nullable ClaimResult settledByRead(Connection connection, ClaimRequest request)
      throws SQLException {
    try (PreparedStatement statement = calls.prepare(connection, sql.find)) {
      statement.setString(1, request.key().bizType());
      statement.setString(2, request.key().bizKey());
      try (ResultSet row = statement.executeQuery()) {
        if (!row.next()) {
          return null;
        }
        DedupRecord existing = recordAsStored(row, request.key());
        if (existing.status() == DedupStatus.PROCESSING
            && request.claimId().equals(row.getString("claim_id"))
            && !otherPayload(row.getString("fingerprint"), request)) {
          return null;
        }
        return blocksClaim(existing, request)
            ? new ClaimResult.Taken(request.key(), existing)
            : null;
      }
    }
  }

  /** Binds the requests' columns of a claim statement. */
  private static void bindClaims(Rows<ClaimRequest> bound, boolean withLease) throws SQLException {
    bound.bind(TEXT, r -> r.key().bizType());
    bound.bind(TEXT, r -> r.key().bizKey());
    bound.bind(TEXT, ClaimRequest::owner);
    bound.bind(BIGINT, r -> r.lease().toMillis());
    bound.bind(BIGINT, r -> (withLease ? r.lease().plus(r.retention()) : r.retention()).toMillis());
    bound.bind(TEXT, ClaimRequest::fingerprint);
    bound.bind(TEXT, r -> StoredText.storable(r.source(), StoredText.MAX_SOURCE_LENGTH));
    bound.bind(TEXT, ClaimRequest::claimId);
  }

  /**
   * One statement for the claim and the marks (see {@link PostgresSql#claimCompleting}). Rarely a
   * second one: for the marks, when one of them did not apply (a lost lease, a vanished record:
   * {@link #update} tells them apart, counting what the first one wrote as written), and for the
   * claim, when the key's record changed under the statement.
   */
  @Override
  public DedupStore.ClaimCompleting claimCompleting(
      Connection connection,
      ClaimRequest request,
      List<ClaimResult.Claimed> completing,
      Duration retention)
      throws SQLException {
    ClaimResult answer;
    long marked;
    try (PreparedStatement statement =
        calls.prepare(connection, sql.claimCompleting.forRows(completing.size()))) {
      statement.setLong(1, retention.toMillis());
      Rows<ClaimResult.Claimed> marks = bindHeldClaims(new Rows<>(statement, 2, completing));
      bindClaims(new Rows<>(statement, marks.nextIndex(), List.of(request)), true);
      try (ResultSet row = statement.executeQuery()) {
        if (!row.next()) {
          throw new DedupStoreException(
              "The claim statement answered no row", request.key(), request.source(), null);
        }
        marked = row.getLong("marked");
        answer = answer(row, request, true);
      }
    }
    List<DedupKey> lost =
        marked == completing.size()
            ? List.of()
            : update(connection, FencedUpdate.COMPLETE, completing, retention, null);
    if (answer == null) {
      answer = claim(connection, List.of(request), true).get(0);
    }
    return new DedupStore.ClaimCompleting(answer, lost);
  }

  /**
   * The answer to one request from its row of the claim statement; null when the record changed
   * under the statement and the key must be claimed again: the holder may have failed, its lease
   * run out, the row been purged, or another consumer inserted it first.
   */
  private @Nullable ClaimResult answer(ResultSet row, ClaimRequest request, boolean withLease)
      throws SQLException {
    DedupKey key = request.key();
    int token = row.getInt("claimed");
    boolean claimed = !row.wasNull();
    boolean own =
        withLease
            && DedupStatus.PROCESSING.name().equals(row.getString("status"))
            && request.claimId().equals(row.getString("claim_id"))
            && !otherPayload(row.getString("fingerprint"), request);
    if (claimed) {
      if (own) {
        log.info(
            "Claim of {} was committed before its reply was lost; it is ours, its lease renewed",
            key);
      }
      return new ClaimResult.Claimed(key, token, request.claimId());
    }
    if (own || row.getString("status") == null) {
      return null; // the row changed since the statement's snapshot: claim again
    }
    DedupRecord existing = recordAsStored(row, key);
    return blocksClaim(existing, request) ? new ClaimResult.Taken(key, existing) : null;
  }

  /**
   * Whether {@code existing} answers the request without a claim. A status a newer version wrote
   * does: the claim statement takes over only FAILED and expired PROCESSING rows, so such a row
   * would be claimed again round after round until the claim gave up without an answer.
   */
  private static boolean blocksClaim(DedupRecord existing, ClaimRequest request) {
    return otherPayload(existing.fingerprint().orElse(null), request)
        || existing.status() == DedupStatus.SUCCESS
        || existing.status() == DedupStatus.UNKNOWN
        || existing.isLeaseLive();
  }

  /**
   * Whether a record of fingerprint {@code stored} was claimed for another payload than the
   * request's: then not even its own claim id makes the request that claim.
   */
  private static boolean otherPayload(@Nullable String stored, ClaimRequest request) {
    return stored != null && request.fingerprint() != null && !stored.equals(request.fingerprint());
  }

  /**
   * Its COMMIT cancelled at the statement timeout ({@link
   * StoreCalls#inOwnTransactionCommittedInTime}).
   */
  @Override
  public <T> T inOwnTransaction(Connection connection, StoreCalls.SqlWork<T> work)
      throws SQLException {
    return calls.inOwnTransactionCommittedInTime(connection, work);
  }

  /**
   * One statement for all the keys (see {@link PostgresSql#complete}); where it finds no record at
   * all, a second one writes the outcome again ({@link PostgresSql#completeVanished}).
   */
  @Override
  protected Written write(
      Connection connection,
      FencedUpdate update,
      List<ClaimResult.Claimed> claims,
      Duration duration,
      @Nullable List<String> errors)
      throws SQLException {
    if (update == FencedUpdate.RENEW) {
      long leaseMillis = duration.toMillis();
      List<ClaimResult.Claimed> renewed =
          eachKey(
              connection,
              sql.renew,
              claims,
              ClaimResult.Claimed::key,
              (statement, claim) -> {
                statement.setLong(1, leaseMillis);
                statement.setString(2, claim.key().bizType());
                statement.setString(3, claim.key().bizKey());
                statement.setInt(4, claim.token());
                statement.setString(5, claim.claimId());
              });
      return new Written(notApplied(claims, renewed, ClaimResult.Claimed::key), List.of());
    }
    PostgresSql.Keyed updateSql = update == FencedUpdate.COMPLETE ? sql.complete : sql.fail;
    List<DedupKey> lost = outcomes(connection, updateSql, claims, duration, errors);
    if (lost.isEmpty()) {
      return new Written(lost, List.of());
    }
    // Rare: a key with no record at all is not another holder's; its outcome is written again,
    // where it is still missing.
    Set<DedupKey> missing = new HashSet<>(lost);
    List<ClaimResult.Claimed> gone = new ArrayList<>();
    List<String> goneErrors = errors == null ? null : new ArrayList<>();
    for (int i = 0; i < claims.size(); i++) {
      if (missing.contains(claims.get(i).key())) {
        gone.add(claims.get(i));
        if (errors != null && goneErrors != null) {
          goneErrors.add(errors.get(i));
        }
      }
    }
    PostgresSql.Keyed vanishedSql =
        update == FencedUpdate.FAIL ? sql.failVanished : sql.completeVanished;
    List<DedupKey> stillLost = fenced(connection, vanishedSql, gone, duration, goneErrors);
    return new Written(stillLost, gone.stream().filter(c -> !stillLost.contains(c.key())).toList());
  }

  /**
   * {@link #fenced} for an outcome statement, whose {@code ON CONFLICT DO UPDATE} may change a row
   * only once: a key named twice (two tokens of one key) goes to a statement of its own, as many as
   * the most times a key is named. A key is lost when no statement answered it.
   */
  private List<DedupKey> outcomes(
      Connection connection,
      PostgresSql.Keyed statementSql,
      List<ClaimResult.Claimed> claims,
      Duration duration,
      @Nullable List<String> errors)
      throws SQLException {
    if (claims.stream().map(ClaimResult.Claimed::key).distinct().count() == claims.size()) {
      return fenced(connection, statementSql, claims, duration, errors);
    }
    List<List<Integer>> rounds = new ArrayList<>();
    Map<DedupKey, Integer> seen = new HashMap<>();
    for (int i = 0; i < claims.size(); i++) {
      int round = seen.merge(claims.get(i).key(), 1, Integer::sum) - 1;
      if (round == rounds.size()) {
        rounds.add(new ArrayList<>());
      }
      rounds.get(round).add(i);
    }
    Set<DedupKey> answered = new HashSet<>();
    for (List<Integer> round : rounds) {
      List<ClaimResult.Claimed> part = round.stream().map(claims::get).toList();
      List<String> partErrors = errors == null ? null : round.stream().map(errors::get).toList();
      Set<DedupKey> notAnswered =
          new HashSet<>(fenced(connection, statementSql, part, duration, partErrors));
      part.stream()
          .map(ClaimResult.Claimed::key)
          .filter(k -> !notAnswered.contains(k))
          .forEach(answered::add);
    }
    return claims.stream()
        .map(ClaimResult.Claimed::key)
        .filter(k -> !answered.contains(k))
        .distinct()
        .toList();
  }

  /**
   * Runs a {@link PostgresSql.Keyed} statement over (type, key, token, claim id{@code , error})
   * rows after {@code duration} in milliseconds; answers the keys it did not answer for.
   */
  private List<DedupKey> fenced(
      Connection connection,
      PostgresSql.Keyed statementSql,
      List<ClaimResult.Claimed> claims,
      Duration duration,
      @Nullable List<String> errors)
      throws SQLException {
    try (PreparedStatement statement =
        calls.prepare(connection, statementSql.forRows(claims.size()))) {
      statement.setLong(1, duration.toMillis());
      Rows<ClaimResult.Claimed> rows = bindHeldClaims(new Rows<>(statement, 2, claims));
      if (errors != null) {
        Iterator<String> error = errors.iterator();
        rows.bind(TEXT, c -> StoredText.storable(error.next(), StoredText.MAX_ERROR_LENGTH));
      }
      return notAnswered(statement, claims.stream().map(ClaimResult.Claimed::key).toList());
    }
  }

  /** Binds the claims' columns of an outcome statement's rows: (type, key, token, claim id). */
  private static Rows<ClaimResult.Claimed> bindHeldClaims(Rows<ClaimResult.Claimed> rows)
      throws SQLException {
    rows.bind(TEXT, c -> c.key().bizType());
    rows.bind(TEXT, c -> c.key().bizKey());
    rows.bind(INT, ClaimResult.Claimed::token);
    rows.bind(TEXT, ClaimResult.Claimed::claimId);
    return rows;
  }

  /**
   * {@link PostgresSql#releaseDelete} for the claims that created their key, {@link
   * PostgresSql#releaseRestore} for re-claims: the token tells which applies, so each key runs one
   * statement, and a group one batch of each kind it holds, both in one transaction, so that a call
   * tried again after a failure finds every claim as it was.
   */
  @Override
  public List<DedupKey> release(Connection connection, List<ClaimResult.Claimed> claims)
      throws SQLException {
    StoreCalls.SqlWork<List<DedupKey>> bothKinds =
        c -> {
          List<ClaimResult.Claimed> released = new ArrayList<>();
          for (boolean created : List.of(true, false)) {
            List<ClaimResult.Claimed> kind =
                claims.stream().filter(claim -> (claim.token() == 1) == created).toList();
            released.addAll(
                eachKey(
                    c,
                    created ? sql.releaseDelete : sql.releaseRestore,
                    kind,
                    ClaimResult.Claimed::key,
                    (statement, claim) -> {
                      statement.setString(1, claim.key().bizType());
                      statement.setString(2, claim.key().bizKey());
                      statement.setInt(3, claim.token());
                      statement.setString(4, claim.claimId());
                    }));
          }
          return notApplied(claims, released, ClaimResult.Claimed::key);
        };
    boolean mixed = claims.stream().map(claim -> claim.token() == 1).distinct().count() > 1;
    return mixed && connection.getAutoCommit()
        ? inOwnTransaction(connection, bothKinds)
        : bothKinds.run(connection);
  }

  /** Binds the parameters of a statement of one key for {@code item}. */
  private interface KeyBinder<T> {
    void bind(PreparedStatement statement, T item) throws SQLException;
  }

  /**
   * Runs {@code statementSql}, a statement of one key, for each of {@code items}; answers the items
   * it applied to (an update count of 1). Several run as one JDBC batch, which pgjdbc sends in one
   * round trip per few hundred statements, in a transaction of their own (one commit) when the
   * connection is in auto-commit mode, and in key order, so that two groups sharing keys lock them
   * in the same order and wait instead of deadlocking.
   */
  private <T> List<T> eachKey(
      Connection connection,
      String statementSql,
      List<T> items,
      Function<T, DedupKey> key,
      KeyBinder<T> binder)
      throws SQLException {
    if (items.isEmpty()) {
      return List.of();
    }
    List<T> ordered = items.stream().sorted(Comparator.comparing(key, KEY_ORDER)).toList();
    StoreCalls.SqlWork<int[]> run =
        c -> {
          try (PreparedStatement statement = calls.prepare(c, statementSql)) {
            if (ordered.size() == 1) {
              binder.bind(statement, ordered.get(0));
              return new int[] {statement.executeUpdate()};
            }
            for (T item : ordered) {
              binder.bind(statement, item);
              statement.addBatch();
            }
            return statement.executeBatch();
          }
        };
    int[] counts =
        ordered.size() == 1 || !connection.getAutoCommit()
            ? run.run(connection)
            : inOwnTransaction(connection, run);
    List<T> applied = new ArrayList<>();
    for (int i = 0; i < ordered.size(); i++) {
      if (counts[i] == 1) {
        applied.add(ordered.get(i));
      } else if (counts[i] != 0) {
        // A driver may answer SUCCESS_NO_INFO for a batch; pgjdbc answers each statement's count.
        throw new SQLException(
            "The JDBC driver answered "
                + counts[i]
                + " as the update count of a statement of one key: cannot tell which keys the"
                + " batch applied to");
      }
    }
    return applied;
  }

  /**
   * The keys of {@code items} that no item of {@code applied} names, in the order of {@code items}:
   * as the statements of a group answered before, a key is applied when any of its tokens was.
   */
  private static <T> List<DedupKey> notApplied(
      List<T> items, List<T> applied, Function<T, DedupKey> key) {
    Set<DedupKey> done = new HashSet<>(applied.stream().map(key).toList());
    return items.stream().map(key).filter(k -> !done.contains(k)).toList();
  }

  /** The keys of {@code keys} that the statement's (biz_type, biz_key) rows do not name. */
  private static List<DedupKey> notAnswered(PreparedStatement statement, List<DedupKey> keys)
      throws SQLException {
    Set<Map.Entry<String, String>> answered = new HashSet<>();
    try (ResultSet rows = statement.executeQuery()) {
      while (rows.next()) {
        answered.add(Map.entry(rows.getString(1), rows.getString(2)));
      }
    }
    return keys.stream().filter(key -> !answered.contains(columns(key))).toList();
  }

  /** A key as its two columns hold it. */
  private static Map.Entry<String, String> columns(DedupKey key) {
    return Map.entry(key.bizType(), key.bizKey());
  }

  /**
   * Binds the columns of a {@link PostgresSql.Keyed} statement's rows, in order from a first
   * parameter: a scalar per column for one row, an array per column for several.
   */
  private static final class Rows<T> {
    private final PreparedStatement statement;
    private final List<T> items;
    private int index;

    Rows(PreparedStatement statement, int firstIndex, List<T> items) {
      this.statement = statement;
      this.index = firstIndex;
      this.items = items;
    }

    /** The index of the parameter after the bound columns. */
    int nextIndex() {
      return index;
    }

    void bind(PostgresSql.Type type, Function<T, @Nullable Object> column) throws SQLException {
      if (items.size() == 1) {
        statement.setObject(index++, column.apply(items.get(0)), type.jdbc);
      } else {
        Array values =
            statement
                .getConnection()
                .createArrayOf(type.arrayElement, items.stream().map(column).toArray());
        statement.setArray(index++, values);
      }
    }
  }

  /** One statement, {@link PostgresSql#purge}, run as {@link #purgeText} says. */
  @Override
  public int purge(Connection connection, int limit) throws SQLException {
    try (PreparedStatement statement = calls.prepare(connection, purgeText(sql.purge))) {
      statement.setInt(1, limit);
      executePurge(statement);
      return statement.getUpdateCount();
    }
  }

  /**
   * One statement deletes the batch and answers its last row (see {@link PurgeSql#deleteBatch}).
   */
  @Override
  public KeysetPurge.Batch deleteExpired(
      Connection connection,
      KeysetPurge.@Nullable Position after,
      @Nullable Duration shortestRetention,
      int limit)
      throws SQLException {
    try (PreparedStatement statement =
        calls.prepare(
            connection,
            purgeText(purgeSql().deleteBatch(after != null, shortestRetention != null)))) {
      int index = bindRange(statement, shortestRetention, after);
      statement.setInt(index, limit);
      executePurge(statement);
      try (ResultSet row = statement.getResultSet()) {
        if (!row.next()) {
          return new KeysetPurge.Batch(0, false, after);
        }
        int deleted = row.getInt("deleted");
        KeysetPurge.Position last =
            new KeysetPurge.Position(
                row.getObject("created_at", OffsetDateTime.class).toInstant(),
                row.getString("biz_type"),
                row.getString("biz_key"));
        return new KeysetPurge.Batch(deleted, deleted >= limit, last);
      }
    }
  }

  /**
   * Preceded by {@link PostgresSql#PURGE_PLANS}, which forbids the planner every plan but the walk
   * along the {@code created_at} index and the primary-key probes, and says why. Both go in one
   * round trip: pgjdbc sends the statements of one text with one Sync, and on an auto-commit
   * connection the server runs everything up to a Sync as one transaction, so the settings hold for
   * the purge's statement and end with it ({@code PurgeWithoutStatisticsTest}).
   */
  @Override
  public String purgeText(String statementSql) {
    return PostgresSql.PURGE_PLANS + "; " + statementSql;
  }

  /** Skips the result of {@link PostgresSql#PURGE_PLANS}. */
  @Override
  public boolean executePurge(PreparedStatement statement) throws SQLException {
    statement.execute();
    return statement.getMoreResults();
  }

  @Override
  public Set<String> columns(Connection connection) throws SQLException {
    Set<String> names = new HashSet<>();
    try (PreparedStatement statement = calls.prepare(connection, sql.columns)) {
      statement.setString(1, table);
      try (ResultSet rows = statement.executeQuery()) {
        while (rows.next()) {
          names.add(rows.getString(1));
        }
      }
    }
    return names;
  }

  @Override
  public List<String> schemasHoldingTable(Connection connection) throws SQLException {
    List<String> schemas = new ArrayList<>();
    try (PreparedStatement statement = calls.prepare(connection, PostgresSql.SCHEMAS_WITH_TABLE)) {
      statement.setString(1, table.substring(table.lastIndexOf('.') + 1));
      try (ResultSet rows = statement.executeQuery()) {
        while (rows.next()) {
          schemas.add(rows.getString(1));
        }
      }
    }
    return schemas;
  }

  /**
   * A table, or the partitions of a partitioned one, still at PostgreSQL's default fillfactor or an
   * earlier schema file's 80.
   */
  @Override
  public @Nullable String storageAdvice(Connection connection) throws SQLException {
    Map<String, Integer> tooFull = new LinkedHashMap<>();
    boolean partitioned = false;
    try (PreparedStatement statement = calls.prepare(connection, PostgresSql.STORAGE_OPTIONS)) {
      statement.setString(1, table);
      try (ResultSet rows = statement.executeQuery()) {
        while (rows.next()) {
          boolean whole = rows.getBoolean("whole");
          partitioned |= !whole;
          int fillfactor = fillfactor(rows.getArray("reloptions"));
          if (fillfactor > PostgresSql.SCHEMA_FILLFACTOR) {
            tooFull.put(whole ? table : rows.getString("name"), fillfactor);
          }
        }
      }
    }
    if (tooFull.isEmpty()) {
      return null;
    }
    String which =
        partitioned
            ? "The partitions of the dedup table "
                + table
                + ": "
                + tooFull.entrySet().stream()
                    .map(entry -> entry.getKey() + " has fillfactor " + entry.getValue())
                    .collect(Collectors.joining(", "))
            : "The dedup table " + table + " has fillfactor " + tooFull.get(table);
    return which
        + " (the schema file sets "
        + PostgresSql.SCHEMA_FILLFACTOR
        + "): the SUCCESS marks of freshly claimed rows often find no room on their page and"
        + " write index entries, which makes marks slower and the table and its indexes grow"
        + " faster. Run "
        + tooFull.keySet().stream()
            .map(
                name ->
                    "ALTER TABLE "
                        + name
                        + " SET (fillfactor = "
                        + PostgresSql.SCHEMA_FILLFACTOR
                        + ");")
            .collect(Collectors.joining(" "))
        + " (a brief lock that blocks no claim; the pages written from then on use it)";
  }

  /** The fillfactor that storage options set; PostgreSQL's default, 100, if they set none. */
  private static int fillfactor(@Nullable Array options) throws SQLException {
    int fillfactor = 100;
    if (options != null) {
      for (Object option : (Object[]) options.getArray()) {
        String setting = String.valueOf(option);
        if (setting.startsWith("fillfactor=")) {
          fillfactor = Integer.parseInt(setting.substring("fillfactor=".length()));
        }
      }
    }
    return fillfactor;
  }

  @Override
  public boolean behindPooler(Connection connection) throws SQLException {
    if (!PostgresPooler.detect(connection)) {
      return false;
    }
    if (connection.getAutoCommit()) {
      PostgresPooler.requireTransactions(connection, table);
    }
    return true;
  }

  @Override
  public String schemaClient() {
    return "psql \"$DATABASE_URL\"";
  }

  @Override
  public String claimIdColumnType() {
    return "varchar(64)";
  }

  @Override
  public @Nullable Instant instant(ResultSet row, String column) throws SQLException {
    Timestamp value = row.getTimestamp(column);
    return value == null ? null : value.toInstant();
  }

  @Override
  public Object time(Instant instant) {
    return OffsetDateTime.ofInstant(instant, ZoneOffset.UTC);
  }
}
