package io.consumerdedup.jdbc;

import static io.consumerdedup.jdbc.internal.PostgresSql.Type.BIGINT;
import static io.consumerdedup.jdbc.internal.PostgresSql.Type.INT;
import static io.consumerdedup.jdbc.internal.PostgresSql.Type.TEXT;

import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.DedupStoreDataException;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.core.DedupStoreUnavailableException;
import io.consumerdedup.core.internal.Durations;
import io.consumerdedup.core.internal.StoredText;
import io.consumerdedup.jdbc.internal.PostgresPooler;
import io.consumerdedup.jdbc.internal.PostgresSql;
import io.consumerdedup.jdbc.internal.StoreCalls;
import io.github.resilience4j.retry.Retry;
import java.sql.Array;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Timestamp;
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
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.Set;
import java.util.function.Function;
import java.util.regex.Pattern;
import javax.sql.DataSource;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The {@link DedupStore} on PostgreSQL, MySQL 8 or MariaDB 10.6+, over any {@link DataSource} (a
 * pool such as HikariCP is recommended). The dialect is detected from the connection ({@link
 * SqlDialect}) or set with {@link Builder#dialect(SqlDialect)}; each dialect's SQL is in one place
 * ({@code PostgresSql}, {@code MySqlSql}). Create the table first from the dialect's schema file,
 * {@code db/consumer-dedup/postgresql/V1__consumer_dedup.sql} or {@code
 * db/consumer-dedup/mysql/V1__consumer_dedup.sql} (on the classpath, Flyway naming); the store
 * never runs DDL.
 *
 * <p>Each call runs in its own short transaction on a connection of its own, so a claim commits
 * before the handler starts. Give it a DataSource that hands out connections of their own (a pool),
 * not one bound to the caller's transaction (such as Spring's {@code
 * TransactionAwareDataSourceProxy}): committing a claim on such a connection would commit the
 * caller's open work with it. Only {@link #claimInTransaction} is meant for that connection.
 *
 * <p>Every call takes bounded time: each statement has a query timeout ({@link
 * Builder#statementTimeout(Duration)}, cancelled by the server) and its connection a network
 * timeout a little longer, so a connection that stops answering without being reset (half-open TCP
 * after a failover) fails instead of hanging; waiting for a pooled connection is bounded by the
 * pool (HikariCP's {@code connectionTimeout}). Transient database errors (connection loss,
 * timeouts, serialization failure, deadlock, admin shutdown, too many connections) are retried with
 * exponential back-off and jitter; when they outlast the retries the call raises {@link
 * DedupStoreUnavailableException}. Data the database refuses (SQL state classes 22 and 23, twice:
 * the second time on a fresh statement) raises {@link DedupStoreDataException}; anything else (a
 * missing table, a permission) {@link DedupStoreException}. Behind a connection pooler such as
 * PgBouncer (detected on the first connection) the store's statements are unnamed server-side
 * statements, so a pooler in transaction mode cannot hand them to another client.
 *
 * <p>Claims, completions and failures are safe to send twice: a claim carries an id by which a
 * retry recognises its own committed claim, and a completion or failure already written under the
 * caller's token counts as written, so a reply lost after the server committed is neither a foreign
 * lease nor a lost one.
 *
 * <pre>{@code
 * JdbcDedupStore store = JdbcDedupStore.builder(dataSource).tableName("consumer_dedup").build();
 * }</pre>
 */
public final class JdbcDedupStore implements DedupStore {

  /** Default table name, as in the schema file. */
  public static final String DEFAULT_TABLE_NAME = "consumer_dedup";

  /** How many columns the store uses (all of them missing: there is no table). */
  public static final int EXPECTED_COLUMN_COUNT = PostgresSql.EXPECTED_COLUMNS.size();

  /** Default number of tries of a store call (the first and its retries) on transient errors. */
  public static final int DEFAULT_RETRY_MAX_ATTEMPTS = 5;

  /** Default wait before the first retry; it doubles each retry, with jitter. */
  public static final Duration DEFAULT_RETRY_INITIAL_BACKOFF = Duration.ofMillis(100);

  /** Default longest wait between two retries. */
  public static final Duration DEFAULT_RETRY_MAX_BACKOFF = Duration.ofSeconds(2);

  /** Default time after the start of a call past which a transient failure is no longer retried. */
  public static final Duration DEFAULT_RETRY_MAX_DURATION = Duration.ofSeconds(10);

  /** Default longest time one statement may run before the server cancels it. */
  public static final Duration DEFAULT_STATEMENT_TIMEOUT = Duration.ofSeconds(5);

  private static final Logger log = LoggerFactory.getLogger(JdbcDedupStore.class);

  /** A table name, optionally schema-qualified: unquoted PostgreSQL identifiers only. */
  private static final Pattern TABLE_NAME =
      Pattern.compile("([A-Za-z_][A-Za-z0-9_]{0,62}\\.)?[A-Za-z_][A-Za-z0-9_]{0,62}");

  /** A claim whose key changes under it between two statements is tried again this many times. */
  private static final int MAX_CLAIM_ROUNDS = 10;

  private final String tableName;
  private final PostgresSql sql;
  private final MySqlStore mysql;

  /** Set by the builder, else detected from the first connection. */
  private volatile @Nullable SqlDialect dialect;

  private final Duration statementTimeout;
  private final StoreCalls calls;

  private JdbcDedupStore(Builder builder) {
    this.tableName = builder.tableName;
    this.statementTimeout = builder.statementTimeout;
    this.sql = new PostgresSql(tableName);
    this.dialect = builder.dialect;
    this.calls =
        new StoreCalls(
            builder.dataSource,
            // The store's own calls take a connection of their own: the pool behind a
            // TransactionBoundDataSource, which hands out only its open transaction's connection.
            builder.dataSource instanceof TransactionBoundDataSource bound
                ? bound.pool()
                : builder.dataSource,
            tableName,
            new StoreCalls.Limits(
                builder.retryMaxAttempts,
                builder.retryInitialBackoff,
                builder.retryMaxBackoff,
                builder.retryMaxDuration,
                builder.statementTimeout),
            log,
            this::checkProduct);
    this.mysql = new MySqlStore(tableName, calls::prepare);
  }

  /**
   * Returns {@code tableName} if it can name the dedup table: an unquoted SQL identifier,
   * optionally schema-qualified ({@code [schema.]name}: letters, digits and underscores, not
   * starting with a digit, at most 63 characters per part). The name goes into SQL text, so nothing
   * else passes.
   *
   * @throws IllegalArgumentException naming the bad value
   */
  public static String checkTableName(String tableName) {
    Objects.requireNonNull(tableName, "tableName");
    if (!TABLE_NAME.matcher(tableName).matches()) {
      throw new IllegalArgumentException(
          "tableName must be an unquoted SQL identifier, optionally schema-qualified"
              + " ([schema.]name: letters, digits, underscores), was '"
              + tableName
              + "'");
    }
    return tableName;
  }

  /** Starts building a store over {@code dataSource}. */
  public static Builder builder(DataSource dataSource) {
    return new Builder(dataSource);
  }

  /** The table this store reads and writes. */
  public String tableName() {
    return tableName;
  }

  /** The longest time one statement may run. */
  public Duration statementTimeout() {
    return statementTimeout;
  }

  /** The resilience4j retry of store calls, for its metrics. */
  public Retry retry() {
    return calls.retry();
  }

  @Override
  public ClaimResult claim(ClaimRequest request) {
    return claimAll(List.of(request)).get(0);
  }

  /** One statement for all the keys (see {@link PostgresSql#claim}), in its own transaction. */
  @Override
  public List<ClaimResult> claimAll(List<ClaimRequest> requests) {
    List<ClaimRequest> distinct = DedupStore.distinct(requests);
    if (distinct.isEmpty()) {
      return List.of();
    }
    return calls.run(
        "claim",
        only(distinct),
        connection ->
            isMySql()
                ? mysql.claim(connection, distinct, true)
                : claimRounds(connection, distinct, true));
  }

  @Override
  public ClaimResult claimInTransaction(ClaimRequest request) {
    return claimAllInTransaction(List.of(request)).get(0);
  }

  /**
   * Runs on the caller's transactional connection, as handed out by the DataSource (for Spring, a
   * {@code TransactionAwareDataSourceProxy}); never commits, and never retries, since a failed
   * statement has already doomed the caller's transaction.
   */
  @Override
  public List<ClaimResult> claimAllInTransaction(List<ClaimRequest> requests) {
    List<ClaimRequest> distinct = DedupStore.distinct(requests);
    if (distinct.isEmpty()) {
      return List.of();
    }
    return calls.inCallersTransaction(
        "claim in the caller's transaction",
        only(distinct),
        connection -> {
          if (connection.getAutoCommit()) {
            throw new IllegalStateException(
                "DedupMode.TRANSACTIONAL needs an open transaction on the dedup table's DataSource,"
                    + " but its connection is in auto-commit mode: run the handler inside a"
                    + " transaction on that DataSource (key "
                    + distinct.get(0).key()
                    + ")");
          }
          return isMySql()
              ? mysql.claim(connection, distinct, false)
              : claimRounds(connection, distinct, false);
        });
  }

  /** The key of a one-key call, named in its errors; null for a batch. */
  private static @Nullable DedupKey only(List<ClaimRequest> requests) {
    return requests.size() == 1 ? requests.get(0).key() : null;
  }

  /**
   * Claims {@code requests} (distinct keys), again for the keys whose record changed under the
   * statement (between its snapshot and its insert), until every key has its answer.
   *
   * @param withLease claim as PROCESSING under the request's lease (separate mode), or as SUCCESS
   *     at once (in the caller's transaction)
   */
  private List<ClaimResult> claimRounds(
      Connection connection, List<ClaimRequest> requests, boolean withLease) throws SQLException {
    Map<DedupKey, ClaimResult> answers = new HashMap<>();
    List<ClaimRequest> open = requests;
    for (int round = 0; round < MAX_CLAIM_ROUNDS && !open.isEmpty(); round++) {
      List<ClaimRequest> unsettled = new ArrayList<>();
      Map<Map.Entry<String, String>, ClaimRequest> byKey = new HashMap<>();
      open.forEach(request -> byKey.put(columns(request.key()), request));
      PostgresSql.Keyed claimSql = withLease ? sql.claim : sql.claimInTransaction;
      try (PreparedStatement statement = prepare(connection, claimSql.forRows(open.size()))) {
        Rows<ClaimRequest> bound = new Rows<>(statement, 1, open);
        bound.bind(TEXT, r -> r.key().bizType());
        bound.bind(TEXT, r -> r.key().bizKey());
        bound.bind(TEXT, ClaimRequest::owner);
        bound.bind(BIGINT, r -> r.lease().toMillis());
        bound.bind(
            BIGINT, r -> (withLease ? r.lease().plus(r.retention()) : r.retention()).toMillis());
        bound.bind(TEXT, ClaimRequest::fingerprint);
        bound.bind(TEXT, r -> StoredText.storable(r.source(), StoredText.MAX_SOURCE_LENGTH));
        bound.bind(TEXT, ClaimRequest::claimId);
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
   * The answer to one request from its row of the claim statement; null when the record changed
   * under the statement and the key must be claimed again: the holder may have failed, its lease
   * run out, the row been purged, or another consumer inserted it first.
   */
  private static @Nullable ClaimResult answer(
      ResultSet row, ClaimRequest request, boolean withLease) throws SQLException {
    DedupKey key = request.key();
    int token = row.getInt("claimed");
    boolean claimed = !row.wasNull();
    boolean own =
        withLease
            && DedupStatus.PROCESSING.name().equals(row.getString("status"))
            && request.claimId().equals(row.getString("claim_id"));
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
    DedupRecord existing = record(row, key, SqlDialect.POSTGRESQL);
    return blocksClaim(existing, request) ? new ClaimResult.Taken(key, existing) : null;
  }

  private static boolean blocksClaim(DedupRecord existing, ClaimRequest request) {
    String stored = existing.fingerprint().orElse(null);
    if (stored != null && request.fingerprint() != null && !stored.equals(request.fingerprint())) {
      return true;
    }
    return existing.status() == DedupStatus.SUCCESS || existing.isLeaseLive();
  }

  @Override
  public boolean complete(DedupKey key, int token, Duration retention) {
    return fencedUpdate(
            "complete",
            sql.complete,
            sql.completeVanished,
            List.of(new Held(key, token)),
            retention,
            null)
        .isEmpty();
  }

  @Override
  public List<DedupKey> completeAll(List<ClaimResult.Claimed> claims, Duration retention) {
    return fencedUpdate(
        "complete", sql.complete, sql.completeVanished, held(claims), retention, null);
  }

  @Override
  public boolean fail(DedupKey key, int token, String error, Duration retention) {
    return fencedUpdate(
            "fail",
            sql.fail,
            sql.failVanished,
            List.of(new Held(key, token)),
            retention,
            List.of(error))
        .isEmpty();
  }

  @Override
  public List<DedupKey> failAll(List<Failure> failures, Duration retention) {
    return fencedUpdate(
        "fail",
        sql.fail,
        sql.failVanished,
        held(failures.stream().map(Failure::claim).toList()),
        retention,
        failures.stream().map(Failure::error).toList());
  }

  @Override
  public boolean renew(DedupKey key, int token, Duration lease) {
    return fencedUpdate("renew", sql.renew, null, List.of(new Held(key, token)), lease, null)
        .isEmpty();
  }

  @Override
  public List<DedupKey> renewAll(List<ClaimResult.Claimed> claims, Duration lease) {
    return fencedUpdate("renew", sql.renew, null, held(claims), lease, null);
  }

  @Override
  public boolean release(ClaimResult.Claimed claim) {
    return releaseAll(List.of(claim)).isEmpty();
  }

  @Override
  public List<DedupKey> releaseAll(List<ClaimResult.Claimed> claims) {
    if (claims.isEmpty()) {
      return List.of();
    }
    return calls.run(
        "release",
        claims.size() == 1 ? claims.get(0).key() : null,
        connection -> {
          if (isMySql()) {
            List<DedupKey> kept = new ArrayList<>();
            for (ClaimResult.Claimed claim : claims) {
              if (!mysql.release(connection, claim)) {
                kept.add(claim.key());
              }
            }
            return kept;
          }
          try (PreparedStatement statement =
              prepare(connection, sql.release.forRows(claims.size()))) {
            Rows<ClaimResult.Claimed> rows = new Rows<>(statement, 1, claims);
            rows.bind(TEXT, c -> c.key().bizType());
            rows.bind(TEXT, c -> c.key().bizKey());
            rows.bind(INT, ClaimResult.Claimed::token);
            rows.bind(TEXT, ClaimResult.Claimed::claimId);
            return notAnswered(statement, claims.stream().map(ClaimResult.Claimed::key).toList());
          }
        });
  }

  /** A key and the token a fenced update presents. */
  private record Held(DedupKey key, int token) {}

  private static final Comparator<Held> HELD_KEY_ORDER =
      Comparator.comparing((Held h) -> h.key().bizType()).thenComparing(h -> h.key().bizKey());

  private static List<Held> held(List<ClaimResult.Claimed> claims) {
    return claims.stream().map(claim -> new Held(claim.key(), claim.token())).toList();
  }

  /**
   * Runs an UPDATE (see {@link PostgresSql#complete}) that applies only where the token still holds
   * the key: binds {@code duration} in milliseconds, then the keys, the tokens and the {@code
   * errors} if any. Where it finds no record at all and {@code vanishedSql} is given, writes the
   * outcome again ({@link PostgresSql#completeVanished}). Answers the keys whose lease was lost.
   */
  private List<DedupKey> fencedUpdate(
      String operation,
      PostgresSql.Keyed updateSql,
      PostgresSql.@Nullable Keyed vanishedSql,
      List<Held> claims,
      Duration duration,
      @Nullable List<String> errors) {
    if (claims.isEmpty()) {
      return List.of();
    }
    return calls.run(
        operation,
        claims.size() == 1 ? claims.get(0).key() : null,
        connection -> {
          if (isMySql()) {
            // One fenced statement per key (MySQL has no arrays to send a batch's keys in one), in
            // one transaction: one commit for the batch, rows locked in key order as a claim
            // locks them. Sent again after a failure, each statement still counts its own earlier
            // write as written.
            StoreCalls.SqlWork<List<DedupKey>> perKey =
                c -> {
                  Map<DedupKey, @Nullable String> messages = new HashMap<>();
                  Iterator<String> error = errors == null ? null : errors.iterator();
                  for (Held claim : claims) {
                    messages.put(
                        claim.key(),
                        error == null
                            ? null
                            : StoredText.storable(error.next(), StoredText.MAX_ERROR_LENGTH));
                  }
                  Set<DedupKey> lost = new HashSet<>();
                  for (Held claim : claims.stream().sorted(HELD_KEY_ORDER).toList()) {
                    String message = messages.get(claim.key());
                    if (mysql.fenced(
                        c, operation, claim.key(), claim.token(), duration.toMillis(), message)) {
                      continue;
                    }
                    if (vanishedSql != null
                        && mysql.writeVanished(
                            c,
                            operation,
                            claim.key(),
                            claim.token(),
                            duration.toMillis(),
                            message)) {
                      logVanished(operation, List.of(claim));
                    } else {
                      lost.add(claim.key());
                    }
                  }
                  return claims.stream().map(Held::key).filter(lost::contains).toList();
                };
            return claims.size() == 1
                ? perKey.run(connection)
                : StoreCalls.inOwnTransaction(connection, perKey);
          }
          List<DedupKey> lost = fenced(connection, updateSql, claims, duration, errors);
          if (vanishedSql == null || lost.isEmpty()) {
            return lost;
          }
          // Rare: a key with no record at all is not another holder's; its outcome is written
          // again, where it is still missing.
          Set<DedupKey> missing = new HashSet<>(lost);
          List<Held> gone = new ArrayList<>();
          List<String> goneErrors = errors == null ? null : new ArrayList<>();
          for (int i = 0; i < claims.size(); i++) {
            if (missing.contains(claims.get(i).key())) {
              gone.add(claims.get(i));
              if (errors != null && goneErrors != null) {
                goneErrors.add(errors.get(i));
              }
            }
          }
          List<DedupKey> stillLost = fenced(connection, vanishedSql, gone, duration, goneErrors);
          logVanished(operation, gone.stream().filter(c -> !stillLost.contains(c.key())).toList());
          return stillLost;
        });
  }

  /**
   * Runs a {@link PostgresSql.Keyed} statement over (type, key, token{@code , error}) rows after
   * {@code duration} in milliseconds; answers the keys it did not answer for.
   */
  private List<DedupKey> fenced(
      Connection connection,
      PostgresSql.Keyed statementSql,
      List<Held> claims,
      Duration duration,
      @Nullable List<String> errors)
      throws SQLException {
    try (PreparedStatement statement = prepare(connection, statementSql.forRows(claims.size()))) {
      statement.setLong(1, duration.toMillis());
      Rows<Held> rows = new Rows<>(statement, 2, claims);
      rows.bind(TEXT, c -> c.key().bizType());
      rows.bind(TEXT, c -> c.key().bizKey());
      rows.bind(INT, Held::token);
      if (errors != null) {
        Iterator<String> error = errors.iterator();
        rows.bind(TEXT, c -> StoredText.storable(error.next(), StoredText.MAX_ERROR_LENGTH));
      }
      return notAnswered(statement, claims.stream().map(Held::key).toList());
    }
  }

  /** Says that the records of {@code written} were gone and their outcome was written again. */
  private void logVanished(String operation, List<Held> written) {
    String status = operation.equals("fail") ? "FAILED" : "SUCCESS";
    for (Held claim : written) {
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

  /** The schema file that creates the table, on the classpath (Flyway naming). */
  public static final String SCHEMA_RESOURCE =
      "db/consumer-dedup/postgresql/V1__consumer_dedup.sql";

  /**
   * Checks that the table exists with every column the store uses, so that a forgotten migration
   * fails an application at start-up instead of every record at run time.
   *
   * @throws IllegalStateException the table is missing or lacks columns; the message names them and
   *     says how to create the table
   * @throws DedupStoreException the database could not be asked
   */
  public void verifyTable() {
    throwIfMissing(missingColumns());
  }

  /**
   * {@link #verifyTable()} in one try: a table that is missing or lacks columns fails, a database
   * that cannot be reached now is only logged (records wait for it like for any outage). Called
   * when an executor is built, and by the Spring Boot start-up check.
   *
   * @throws IllegalStateException the table is missing or lacks columns; the message names them and
   *     the schema file to apply
   */
  @Override
  public void verifyReady() {
    verifyReady(DedupMode.SEPARATE);
  }

  /**
   * {@link #verifyReady()}; in mode TRANSACTIONAL it also refuses a DataSource that reaches
   * PostgreSQL through a connection pooler with named server-side statements, which the handler's
   * own statements would meet on another server connection.
   *
   * @throws DedupConfigurationException in mode TRANSACTIONAL behind a pooler, unless the JDBC URL
   *     has {@code prepareThreshold=0}; the message says so
   */
  @Override
  public void verifyReady(DedupMode mode) {
    if (mode == DedupMode.TRANSACTIONAL) {
      calls.requireUnnamedHandlerStatements();
    }
    List<String> missing;
    try {
      missing = missingColumnsNow();
    } catch (DedupStoreUnavailableException e) {
      log.warn(
          "Could not check the dedup table {} now; records wait until the database answers: {}",
          tableName,
          e.getMessage());
      return;
    } catch (DedupStoreException e) {
      log.warn("Could not check the dedup table {}: {}", tableName, e.getMessage());
      return;
    }
    throwIfMissing(missing);
  }

  private void throwIfMissing(List<String> missing) {
    if (missing.isEmpty()) {
      return;
    }
    boolean absent = missing.size() == PostgresSql.EXPECTED_COLUMNS.size();
    SqlDialect known = dialect;
    String schemaResource = known == null ? SCHEMA_RESOURCE : known.schemaResource();
    boolean onMySql = known == SqlDialect.MYSQL;
    throw new IllegalStateException(
        (absent
                ? "The dedup table " + tableName + " does not exist"
                : "The dedup table "
                    + tableName
                    + " lacks the column(s) "
                    + String.join(", ", missing)
                    + " (it was created from an older schema file)")
            + ". Create it from the schema file "
            + schemaResource
            + " (in the consumer-dedup-schema jar, Flyway naming: copy it into your migrations), for"
            + " example: unzip -p consumer-dedup-schema-<version>.jar "
            + schemaResource
            + (onMySql ? " | mysql <database>" : " | psql \"$DATABASE_URL\"")
            + (absent
                ? "; with Spring Boot, consumer-dedup.initialize-schema=always creates it at"
                    + " start-up"
                : "; for claim_id: ALTER TABLE "
                    + tableName
                    + " ADD COLUMN claim_id "
                    + (onMySql
                        ? "VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL"
                        : "varchar(64)")));
  }

  /** The columns the store needs that the table lacks; all of them if there is no table. */
  public List<String> missingColumns() {
    return calls.run("table check", null, this::presentColumns).missing();
  }

  /**
   * {@link #missingColumns()} in one try, without retries: for a start-up or health check, which
   * must answer at once.
   *
   * @throws DedupStoreUnavailableException the database cannot be reached now
   * @throws DedupStoreException the database could not be asked
   */
  public List<String> missingColumnsNow() {
    return calls.runOnce("table check", null, this::presentColumns).missing();
  }

  private Columns presentColumns(Connection connection) throws SQLException {
    if (isMySql()) {
      return new Columns(new HashSet<>(mysql.columns(connection, tableName)));
    }
    Set<String> names = new HashSet<>();
    try (PreparedStatement statement = prepare(connection, sql.columns)) {
      statement.setString(1, tableName);
      try (ResultSet rows = statement.executeQuery()) {
        while (rows.next()) {
          names.add(rows.getString(1));
        }
      }
    }
    return new Columns(names);
  }

  /** The columns a table has. */
  private record Columns(Set<String> present) {
    /** The columns the store needs that are not present, in the schema file's order. */
    List<String> missing() {
      return PostgresSql.EXPECTED_COLUMNS.stream()
          .filter(column -> !present.contains(column))
          .toList();
    }
  }

  @Override
  public Optional<DedupRecord> find(DedupKey key) {
    return calls.run(
        "find",
        key,
        connection ->
            Optional.ofNullable(isMySql() ? mysql.find(connection, key) : read(connection, key)));
  }

  @Override
  public int purge(int limit) {
    if (limit < 1) {
      throw new IllegalArgumentException("limit must be at least 1, was " + limit);
    }
    return calls.run(
        "purge",
        null,
        connection -> {
          if (isMySql()) {
            return mysql.purge(connection, limit);
          }
          try (PreparedStatement statement = prepare(connection, sql.purge)) {
            statement.setInt(1, limit);
            return statement.executeUpdate();
          }
        });
  }

  private @Nullable DedupRecord read(Connection connection, DedupKey key) throws SQLException {
    try (PreparedStatement statement = prepare(connection, sql.find)) {
      statement.setString(1, key.bizType());
      statement.setString(2, key.bizKey());
      try (ResultSet row = statement.executeQuery()) {
        return row.next() ? record(row, key, SqlDialect.POSTGRESQL) : null;
      }
    }
  }

  /** The record of {@code key} in the current row of a statement that selects its columns. */
  static DedupRecord record(ResultSet row, DedupKey key, SqlDialect dialect) throws SQLException {
    return new DedupRecord(
        key,
        DedupStatus.valueOf(row.getString("status")),
        row.getInt("attempts"),
        row.getString("owner"),
        instant(row, "lease_until", dialect),
        row.getString("fingerprint"),
        row.getString("last_error"),
        row.getString("source"),
        Objects.requireNonNull(instant(row, "created_at", dialect)),
        Objects.requireNonNull(instant(row, "updated_at", dialect)),
        Objects.requireNonNull(instant(row, "expires_at", dialect)),
        row.getBoolean("lease_live"));
  }

  private PreparedStatement prepare(Connection connection, String statementSql)
      throws SQLException {
    return calls.prepare(connection, statementSql);
  }

  /**
   * A time column: timestamptz on PostgreSQL; on MySQL a DATETIME(6) holding UTC wall-clock time,
   * read as such whatever the driver's and the JVM's time zones.
   */
  private static @Nullable Instant instant(ResultSet row, String column, SqlDialect dialect)
      throws SQLException {
    if (dialect == SqlDialect.MYSQL) {
      LocalDateTime value = row.getObject(column, LocalDateTime.class);
      return value == null ? null : value.toInstant(ZoneOffset.UTC);
    }
    Timestamp value = row.getTimestamp(column);
    return value == null ? null : value.toInstant();
  }

  /**
   * Detects the dialect from the first connection, unless the builder set it, and whether the
   * connection reaches PostgreSQL through a connection pooler.
   */
  private boolean checkProduct(Connection connection) throws SQLException {
    String product = connection.getMetaData().getDatabaseProductName();
    SqlDialect detected = SqlDialect.forProduct(product);
    if (dialect == null) {
      if (detected == null) {
        throw new DedupStoreException(
            "JdbcDedupStore supports PostgreSQL, MySQL and MariaDB; the DataSource is " + product,
            null,
            null,
            null);
      }
      dialect = detected;
    }
    return dialect == SqlDialect.POSTGRESQL && PostgresPooler.detect(connection);
  }

  /** The store's dialect, once the first connection has told it (or the builder set it). */
  public Optional<SqlDialect> dialect() {
    return Optional.ofNullable(dialect);
  }

  private boolean isMySql() {
    return dialect == SqlDialect.MYSQL;
  }

  /** How the store runs its statements; for the admin operations and the janitor beside it. */
  StoreCalls calls() {
    return calls;
  }

  /** The dialect, inside a store call (the connection has told it by then). */
  SqlDialect knownDialect() {
    return Objects.requireNonNull(dialect, "dialect");
  }

  /** Builds a {@link JdbcDedupStore}; every setter validates its value at once. */
  public static final class Builder {
    private final DataSource dataSource;
    private String tableName = DEFAULT_TABLE_NAME;
    private int retryMaxAttempts = DEFAULT_RETRY_MAX_ATTEMPTS;
    private Duration retryInitialBackoff = DEFAULT_RETRY_INITIAL_BACKOFF;
    private Duration retryMaxBackoff = DEFAULT_RETRY_MAX_BACKOFF;
    private Duration statementTimeout = DEFAULT_STATEMENT_TIMEOUT;
    private Duration retryMaxDuration = DEFAULT_RETRY_MAX_DURATION;
    private @Nullable SqlDialect dialect;

    private Builder(DataSource dataSource) {
      this.dataSource = Objects.requireNonNull(dataSource, "dataSource");
    }

    /**
     * The dedup table, optionally schema-qualified ({@code billing.consumer_dedup}). Default
     * {@value #DEFAULT_TABLE_NAME}.
     *
     * @throws IllegalArgumentException if it is not a plain SQL identifier (letters, digits and
     *     underscores, not starting with a digit, at most 63 characters per part)
     */
    public Builder tableName(String tableName) {
      this.tableName = checkTableName(tableName);
      return this;
    }

    /**
     * The database's dialect, instead of detecting it from the first connection's metadata (a proxy
     * or an unusual driver may name the product otherwise).
     */
    public Builder dialect(SqlDialect dialect) {
      this.dialect = Objects.requireNonNull(dialect, "dialect");
      return this;
    }

    /**
     * Tries of a store call on transient errors, the first included; 1 disables retries. Default
     * {@value #DEFAULT_RETRY_MAX_ATTEMPTS}.
     */
    public Builder retryMaxAttempts(int retryMaxAttempts) {
      if (retryMaxAttempts < 1) {
        throw new IllegalArgumentException(
            "retryMaxAttempts must be at least 1, was " + retryMaxAttempts);
      }
      this.retryMaxAttempts = retryMaxAttempts;
      return this;
    }

    /** Wait before the first retry. Default {@link #DEFAULT_RETRY_INITIAL_BACKOFF}. */
    public Builder retryInitialBackoff(Duration retryInitialBackoff) {
      this.retryInitialBackoff =
          Durations.requirePositive("retryInitialBackoff", retryInitialBackoff);
      return this;
    }

    /**
     * Longest time one statement may run before the server cancels it (whole seconds, rounded up);
     * the connection's network timeout is twice this, so a connection that stops answering fails
     * instead of hanging. Default {@link #DEFAULT_STATEMENT_TIMEOUT}.
     */
    public Builder statementTimeout(Duration statementTimeout) {
      this.statementTimeout = Durations.requirePositive("statementTimeout", statementTimeout);
      return this;
    }

    /**
     * Time after the start of a call past which a transient failure is not tried again, whatever
     * {@link #retryMaxAttempts(int)} allows: a call then takes at most this plus one try (the wait
     * for a pooled connection, bounded by the pool, and twice the statement timeout). Default
     * {@link #DEFAULT_RETRY_MAX_DURATION}.
     */
    public Builder retryMaxDuration(Duration retryMaxDuration) {
      this.retryMaxDuration = Durations.requirePositive("retryMaxDuration", retryMaxDuration);
      return this;
    }

    /** Longest wait between two retries. Default {@link #DEFAULT_RETRY_MAX_BACKOFF}. */
    public Builder retryMaxBackoff(Duration retryMaxBackoff) {
      this.retryMaxBackoff = Durations.requirePositive("retryMaxBackoff", retryMaxBackoff);
      return this;
    }

    /**
     * Builds the store. It connects lazily, so a database that is down at start-up fails the first
     * call, not the application.
     *
     * @throws IllegalArgumentException if the initial back-off exceeds the longest one
     */
    public JdbcDedupStore build() {
      if (retryInitialBackoff.compareTo(retryMaxBackoff) > 0) {
        throw new IllegalArgumentException(
            "retryInitialBackoff ("
                + retryInitialBackoff
                + ") must not exceed retryMaxBackoff ("
                + retryMaxBackoff
                + ")");
      }
      return new JdbcDedupStore(this);
    }
  }
}
