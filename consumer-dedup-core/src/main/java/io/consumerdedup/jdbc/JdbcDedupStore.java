package io.consumerdedup.jdbc;

import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.DedupStoreDataException;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.core.DedupStoreUnavailableException;
import io.consumerdedup.core.DedupTableMissingException;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.internal.Durations;
import io.consumerdedup.jdbc.internal.Dialect;
import io.consumerdedup.jdbc.internal.Dialect.FencedUpdate;
import io.consumerdedup.jdbc.internal.PostgresPooler;
import io.consumerdedup.jdbc.internal.PostgresSql;
import io.consumerdedup.jdbc.internal.StoreCalls;
import io.consumerdedup.jdbc.internal.TableCheck;
import io.github.resilience4j.retry.Retry;
import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
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
 * retry recognises its own committed claim, and a completion or failure already written by the
 * caller's claim counts as written, so a reply lost after the server committed is neither a foreign
 * lease nor a lost one. Completions, failures and renewals are fenced by the claim's token and its
 * id, so a holder whose record vanished never writes over a claim of the key made anew, though that
 * claim starts again at token 1.
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

  private final String tableName;

  private final AutodetectDialect dialect;
  private final Duration statementTimeout;
  private final StoreCalls calls;
  private final TableCheck tableCheck;

  /**
   * The DataSource of mode TRANSACTIONAL without Spring, whose commits check the claims; or null.
   */
  private final @Nullable TransactionBoundDataSource transactions;

  private JdbcDedupStore(Builder builder) {
    this.tableName = builder.tableName;
    this.transactions =
        builder.dataSource instanceof TransactionBoundDataSource bound ? bound : null;
    this.statementTimeout = builder.statementTimeout;
    this.dialect = new AutodetectDialect(builder.dialect, tableName, log);
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
            dialect);
    this.tableCheck = new TableCheck(calls, tableName, log);
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

  /** Work on a connection, for {@link #withStatementsAsTheStoreMakesThem}. */
  @FunctionalInterface
  public interface ConnectionWork<T> {
    T run(Connection connection) throws SQLException;
  }

  /**
   * Runs {@code work} on {@code connection} with its statements made as the store makes its own,
   * for an application's schema set-up on the dedup table's DataSource. Behind a PostgreSQL pooler
   * in transaction mode, pgjdbc's named statements (its COMMIT is named from the first one) meet
   * another client's of the same name on the shared server connection: there every statement of
   * {@code work} is unnamed, and the connection's threshold is set back when it ends. Elsewhere
   * {@code work} runs on the connection as it is.
   */
  public static <T> T withStatementsAsTheStoreMakesThem(
      Connection connection, ConnectionWork<T> work) throws SQLException {
    if (!PostgresPooler.detect(connection)) {
      return work.run(connection);
    }
    int prepareThreshold = PostgresPooler.unnameStatements(connection);
    try {
      return work.run(connection);
    } finally {
      PostgresPooler.setPrepareThreshold(connection, prepareThreshold);
    }
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

  /** One statement for all the keys on PostgreSQL, in its own transaction. */
  @Override
  public List<ClaimResult> claimAll(List<ClaimRequest> requests) {
    List<ClaimRequest> distinct = DedupStore.distinct(requests);
    if (distinct.isEmpty()) {
      return List.of();
    }
    return calls.run(
        "claim",
        only(distinct),
        (connection, dialect) -> dialect.claim(connection, distinct, true));
  }

  /**
   * One commit for the claim and the marks; on PostgreSQL one statement (see {@code
   * PostgresSql#claimCompleting}).
   */
  @Override
  public ClaimCompleting claimCompleting(
      ClaimRequest request, List<ClaimResult.Claimed> completing, Duration retention) {
    if (completing.isEmpty()) {
      return new ClaimCompleting(claim(request), List.of());
    }
    return calls.run(
        "claim",
        request.key(),
        (connection, dialect) ->
            dialect.claimCompleting(connection, request, completing, retention));
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
        (connection, dialect) -> {
          if (connection.getAutoCommit()) {
            // Every delivery meets this again until the application is fixed: a handler failure
            // would spend the record's attempts and dead-letter it unapplied.
            throw new DedupConfigurationException(
                "DedupMode.TRANSACTIONAL needs an open transaction on the dedup table's DataSource,"
                    + " but its connection is in auto-commit mode: run the handler inside a"
                    + " transaction on that DataSource (key "
                    + distinct.get(0).key()
                    + ")",
                distinct.get(0).key(),
                distinct.get(0).source());
          }
          List<ClaimResult> results = dialect.claim(connection, distinct, false);
          checkBeforeCommit(results, dialect);
          return results;
        });
  }

  /**
   * Has the transaction's commit refused if the database rolled the transaction back under the work
   * after these claims (InnoDB does at a deadlock; see {@link Dialect#heldInTransaction}). The
   * executor reads each claim's row when its handler returns, and a failed handler's mark finds no
   * row; but a caller that goes on past a failed key and commits the rest (as documented) would
   * commit the writes made after the rollback alone, with no dedup row. Each claim is added; the
   * transaction reads the row of the earliest one still in it (one the work undid by a rollback to
   * a savepoint is not), since a rollback after it took its row, and nothing else gives a claim in
   * the caller's transaction back before the commit (its release is refused).
   */
  private void checkBeforeCommit(List<ClaimResult> results, Dialect dialect) {
    if (transactions == null) {
      return;
    }
    for (ClaimResult result : results) {
      if (result instanceof ClaimResult.Claimed claim) {
        transactions.checkBeforeCommit(
            this,
            connection ->
                dialect.heldInTransaction(connection, claim)
                    ? null
                    : "The database rolled back the transaction of the claim on "
                        + claim.key()
                        + " while the work ran (InnoDB does at a deadlock, whose exception the"
                        + " work caught and went on): the dedup records claimed before that"
                        + " statement and the writes with them are gone, and what the work"
                        + " wrote after it would commit alone. It is rolled back as the work's"
                        + " failure; let the statement's failure end the work, or run the"
                        + " statement under a savepoint");
      }
    }
  }

  /**
   * Runs on the caller's transactional connection, as {@link #claimAllInTransaction}; marks nothing
   * on a connection in auto-commit mode: the claim's transaction has ended by then (a listener's
   * database transaction that committed before the container's Kafka transaction rolled back), and
   * its outcome is decided. Marked FAILED then, a committed SUCCESS was applied again by the
   * redelivery.
   */
  @Override
  public boolean failInTransaction(ClaimResult.Claimed claim, String error) {
    return calls.inCallersTransaction(
        "record a failure in the caller's transaction",
        claim.key(),
        (connection, dialect) ->
            !connection.getAutoCommit() && dialect.failInTransaction(connection, claim, error));
  }

  /**
   * Reads the claim's record on the caller's transactional connection; true in auto-commit mode,
   * where the claim's transaction has ended and its outcome is decided (as {@link
   * #failInTransaction}).
   */
  @Override
  public boolean heldInTransaction(ClaimResult.Claimed claim) {
    return calls.inCallersTransaction(
        "check a claim in the caller's transaction",
        claim.key(),
        (connection, dialect) ->
            connection.getAutoCommit() || dialect.heldInTransaction(connection, claim));
  }

  /** The key of a one-key call, named in its errors; null for a batch. */
  private static @Nullable DedupKey only(List<ClaimRequest> requests) {
    return requests.size() == 1 ? requests.get(0).key() : null;
  }

  @Override
  public boolean complete(ClaimResult.Claimed claim, Duration retention) {
    return fencedUpdate(FencedUpdate.COMPLETE, List.of(claim), retention, null).isEmpty();
  }

  @Override
  public List<DedupKey> completeAll(List<ClaimResult.Claimed> claims, Duration retention) {
    return fencedUpdate(FencedUpdate.COMPLETE, claims, retention, null);
  }

  @Override
  public boolean fail(ClaimResult.Claimed claim, String error, Duration retention) {
    return fencedUpdate(FencedUpdate.FAIL, List.of(claim), retention, List.of(error)).isEmpty();
  }

  @Override
  public List<DedupKey> failAll(List<Failure> failures, Duration retention) {
    return fencedUpdate(
        FencedUpdate.FAIL,
        failures.stream().map(Failure::claim).toList(),
        retention,
        failures.stream().map(Failure::error).toList());
  }

  @Override
  public boolean renew(ClaimResult.Claimed claim, Duration lease) {
    return fencedUpdate(FencedUpdate.RENEW, List.of(claim), lease, null).isEmpty();
  }

  @Override
  public List<DedupKey> renewAll(List<ClaimResult.Claimed> claims, Duration lease) {
    return fencedUpdate(FencedUpdate.RENEW, claims, lease, null);
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
        (connection, dialect) -> dialect.release(connection, claims));
  }

  /**
   * Applies {@code update} where each claim still holds its key (see {@link Dialect#update});
   * answers the keys whose lease was lost.
   */
  private List<DedupKey> fencedUpdate(
      FencedUpdate update,
      List<ClaimResult.Claimed> claims,
      Duration duration,
      @Nullable List<String> errors) {
    if (claims.isEmpty()) {
      return List.of();
    }
    return calls.run(
        update.operation(),
        claims.size() == 1 ? claims.get(0).key() : null,
        (connection, dialect) -> dialect.update(connection, update, claims, duration, errors));
  }

  /** The schema file that creates the table, on the classpath (Flyway naming). */
  public static final String SCHEMA_RESOURCE =
      "db/consumer-dedup/postgresql/V1__consumer_dedup.sql";

  /**
   * Checks that the table exists with every column the store uses, so that a forgotten migration
   * fails an application at start-up instead of every record at run time.
   *
   * @throws DedupTableMissingException the table is missing or lacks columns; the message names
   *     them and says how to create the table
   * @throws DedupStoreException the database could not be asked
   */
  public void verifyTable() {
    tableCheck.verify();
  }

  /**
   * {@link #verifyTable()} in one try: a table that is missing or lacks columns fails, a database
   * that cannot be reached now is only logged (records wait for it like for any outage). Called
   * when an executor is built, and by the Spring Boot start-up check.
   *
   * @throws DedupTableMissingException the table is missing or lacks columns; the message names
   *     them and the schema file to apply
   * @throws io.consumerdedup.core.DedupConfigurationException the database is not one the store
   *     supports (PostgreSQL, MySQL, MariaDB), or no driver accepts the DataSource's JDBC URL (a
   *     misspelt scheme, a driver's jar left out): no try would ever connect
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
    tableCheck.verifyIfReachable();
  }

  /** The columns the store needs that the table lacks; all of them if there is no table. */
  public List<String> missingColumns() {
    return tableCheck.missingColumns();
  }

  /**
   * {@link #missingColumns()} in one try, without retries: for a start-up or health check, which
   * must answer at once.
   *
   * @throws DedupStoreUnavailableException the database cannot be reached now
   * @throws DedupStoreException the database could not be asked
   */
  public List<String> missingColumnsNow() {
    return tableCheck.missingColumnsNow();
  }

  /**
   * The privileges on the table that the store needs (SELECT, INSERT, UPDATE, DELETE) and the
   * DataSource's role lacks, in one try: for a health check. The columns do not tell: the catalog
   * shows every column to a role granted SELECT alone, whose claims are all refused.
   *
   * @throws DedupStoreUnavailableException the database cannot be reached now
   * @throws DedupStoreException the database could not be asked
   */
  public List<String> missingPrivilegesNow() {
    return tableCheck.missingPrivilegesNow();
  }

  @Override
  public Optional<DedupRecord> find(DedupKey key) {
    return calls.run(
        "find", key, (connection, dialect) -> Optional.ofNullable(dialect.find(connection, key)));
  }

  /**
   * {@inheritDoc}
   *
   * <p>Oldest first along the {@code created_at} index. A purge that finds fewer expired rows than
   * {@code limit} walks on over every unexpired row to the end of that index, one heap fetch each:
   * on a big table longer than the statement timeout, which cancels it and the deletes it had found
   * with it, at every call. For a one-shot purge of such a table (a scheduled job), use {@link
   * #purge(int, Duration)}, or run a {@link DedupJanitor}.
   */
  @Override
  public int purge(int limit) {
    requirePurgeLimit(limit);
    return calls.run("purge", null, (connection, dialect) -> dialect.purge(connection, limit));
  }

  /**
   * Deletes up to {@code limit} expired records, oldest first, as {@link #purge(int)} does, looking
   * only at the rows created longer ago than {@code shortestRetention} (database time), as the
   * janitor's batches do when told it ({@link DedupJanitor.Builder#shortestRetention}): a row's
   * expiry is the database's now at a write plus the writer's retention, and its creation is no
   * later than that write, so no younger row can have expired. The purge then ends at that horizon
   * instead of walking every unexpired row to the end of the index.
   *
   * @param shortestRetention the shortest retention any writer of the table uses (of every executor
   *     writing to it, the least of its successRetention and failedRetention); set too long, a row
   *     of a writer with a shorter one is deleted by a later purge, once its creation passes the
   *     horizon, never earlier. At most {@link IdempotentExecutor#LONGEST_RETENTION}
   * @return how many records were deleted
   */
  public int purge(int limit, Duration shortestRetention) {
    requirePurgeLimit(limit);
    Duration horizon = requireShortestRetention(shortestRetention);
    return calls
        .run(
            "purge",
            null,
            (connection, dialect) -> dialect.deleteExpired(connection, null, horizon, limit))
        .deleted();
  }

  /** A purge's shortest retention, here and the janitor's: positive, at most the longest one. */
  static Duration requireShortestRetention(Duration shortestRetention) {
    return Durations.requireBetween(
        "shortestRetention",
        shortestRetention,
        Duration.ofMillis(1),
        IdempotentExecutor.LONGEST_RETENTION,
        "the range of a retention");
  }

  private static void requirePurgeLimit(int limit) {
    if (limit < 1) {
      throw new IllegalArgumentException("limit must be at least 1, was " + limit);
    }
  }

  /** The store's dialect, once the first connection has told it (or the builder set it). */
  public Optional<SqlDialect> dialect() {
    return dialect.chosen();
  }

  /** How the store runs its statements; for the admin operations and the janitor beside it. */
  StoreCalls calls() {
    return calls;
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
     * instead of hanging. Both are at most {@code Integer.MAX_VALUE} milliseconds (about 24.8
     * days), the most the drivers take: a longer timeout (a year, to mean none) counts as that.
     * Default {@link #DEFAULT_STATEMENT_TIMEOUT}.
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
