package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.jdbc.DedupJanitor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.jdbc.SqlDialect;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.List;
import java.util.Locale;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import javax.sql.DataSource;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.boot.health.contributor.Health;
import org.springframework.boot.health.contributor.HealthIndicator;

/**
 * Health {@code consumerdedup}: UP when the dedup table answers with every column the store uses
 * and the DataSource's role may read, insert, update and delete its rows; DOWN with the reason (the
 * database cannot be reached, the table is missing, columns are missing, privileges are missing).
 * One try, no retries, and an answer within {@link ConsumerDedupProperties#DEFAULT_HEALTH_TIMEOUT}
 * (or the timeout given): the check runs on a thread of its own, and a table that does not answer
 * by then (the connection pool exhausted, the database hanging) is DOWN with that reason, instead
 * of holding the probe as long as the pool's connection timeout (30 s with HikariCP's default)
 * while a probe gives up after 1 s (Kubernetes' default). A check still running is waited for by
 * the next probe rather than started again, so a database that hangs costs one thread, not one per
 * probe. When this instance runs the janitor, its last measured backlog is a detail ({@code purge};
 * {@code behind: true} when the oldest expired record expired more than {@link
 * DedupJanitor#BEHIND_AFTER_INTERVALS} intervals ago; {@code unknown} before the first count and
 * while the last one failed): the table still answers, so the status stays UP.
 *
 * <p>Given the table's DataSource, on PostgreSQL the check first asks {@code pg_locks}, which takes
 * no lock, whether another transaction holds a lock on the table that its writes wait for (a
 * migration's {@code ALTER TABLE}, a {@code VACUUM FULL}, a {@code CREATE INDEX} without {@code
 * CONCURRENTLY}, a {@code LOCK TABLE}): the probes would queue behind it, each holding a pool
 * connection up to the store's statement timeout, and the check answered only that the table did
 * not answer. It is DOWN at once, naming the lock and its holder; or, for such a lock still waiting
 * (a migration's queued behind a long read, which every later claim queues behind in turn), the
 * transaction that wants it and those it waits behind. A lock the look cannot see (taken just after
 * it) is still met by the probes: given the DataSource, they run through a store over it whose
 * statements the database cancels once the check's timeout has passed, so that a probe gives its
 * pool connection back when its answer is no longer waited for, rather than at the store's
 * statement timeout; the next check's look then sees a lock that has been granted since.
 */
public class ConsumerDedupHealthIndicator implements HealthIndicator {
  /**
   * Whether a granted lock {@code o} on the table conflicts with the lock {@code l} of the look, by
   * PostgreSQL's table of conflicting lock modes, for the modes the look reports: the processes a
   * waiting lock waits behind. A process holding a lock that does not conflict with it (a plain
   * reader's ACCESS SHARE beside a waiting CREATE INDEX's SHARE) was named too, and an operator
   * sent to end the process that holds the table up ended one that did not.
   */
  private static final String CONFLICTS_WITH_THE_WAITING_LOCK =
      "(l.mode = 'AccessExclusiveLock' OR o.mode = ANY (CASE l.mode"
          + " WHEN 'ShareLock' THEN ARRAY['RowExclusiveLock', 'ShareUpdateExclusiveLock',"
          + " 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock']"
          + " WHEN 'ShareRowExclusiveLock' THEN ARRAY['RowExclusiveLock',"
          + " 'ShareUpdateExclusiveLock', 'ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock',"
          + " 'AccessExclusiveLock']"
          + " WHEN 'ExclusiveLock' THEN ARRAY['RowShareLock', 'RowExclusiveLock',"
          + " 'ShareUpdateExclusiveLock', 'ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock',"
          + " 'AccessExclusiveLock'] END))";

  /**
   * Locks on the table that conflict with the ROW EXCLUSIVE lock of a claim, a granted one first,
   * with the processes holding a lock on the table that a waiting one waits behind (one whose mode
   * conflicts with it; readers queued behind it are not granted). A waiting one holds the claims
   * too: PostgreSQL queues a later lock that conflicts with one waiting behind it (a migration's
   * ALTER TABLE behind a long read), and the look that saw granted locks only let the check wait
   * out its timeout. Of this database only: pg_locks lists the whole server's, and databases made
   * from one template give their tables the same OIDs, so that a lock in one tenant's database made
   * another's DOWN. The holders are read from pg_locks rather than asked of {@code
   * pg_blocking_pids}, which a server may keep from the role: the statement then failed whole,
   * granted locks unseen.
   */
  private static final String BLOCKING_LOCKS =
      "SELECT l.mode, l.pid, a.application_name, l.granted, COALESCE("
          + holders(" AND " + CONFLICTS_WITH_THE_WAITING_LOCK)
          + ", "
          + holders("")
          + ")"
          + " FROM pg_locks l"
          + " LEFT JOIN pg_stat_activity a ON a.pid = l.pid"
          + " WHERE l.locktype = 'relation'"
          + " AND l.pid IS DISTINCT FROM pg_backend_pid()"
          + " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
          + " AND l.relation = to_regclass(?)"
          + " AND l.mode IN ('ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock',"
          + " 'AccessExclusiveLock')"
          + " ORDER BY l.granted DESC, l.pid LIMIT 1";

  /**
   * The processes other than the waiting one's holding a granted lock on its table that meets
   * {@code condition}. Read with the conflicting modes first, then, where none conflicts, with any
   * mode: a lock can wait behind another waiting one (a CREATE INDEX queued behind an ALTER TABLE
   * that waits for a long read), and PostgreSQL 13 does not say which waiter came first, so that
   * the look may have picked the one behind; the holders of any lock then name the long read, as
   * they did before the conflicts were read. Predicate locks (SIReadLock) block nothing and are
   * never named.
   */
  private static String holders(String condition) {
    return "(SELECT string_agg(h.pid::text, ', ' ORDER BY h.pid) FROM"
        + " (SELECT DISTINCT o.pid FROM pg_locks o WHERE o.granted AND o.locktype = 'relation'"
        + " AND o.database = l.database AND o.relation = l.relation AND o.pid <> l.pid"
        + " AND o.mode <> 'SIReadLock' AND o.pid IS DISTINCT FROM pg_backend_pid()"
        + condition
        + ") h)";
  }

  private static final Logger log = LoggerFactory.getLogger(ConsumerDedupHealthIndicator.class);

  private final JdbcDedupStore store;

  /**
   * Runs the probes: the store, or one over the table's DataSource that gives up with the check.
   */
  private final JdbcDedupStore probes;

  private final @Nullable DedupJanitor janitor;
  private final Duration timeout;
  private final @Nullable DataSource dataSource;
  private final AtomicReference<@Nullable CompletableFuture<TableState>> running =
      new AtomicReference<>();

  /** Whether a look that failed has been logged: each check would fail it the same way. */
  private final AtomicBoolean lookFailureLogged = new AtomicBoolean();

  /**
   * What a check found: the columns the store needs that the table lacks, and, when it has them
   * all, the privileges on it that the DataSource's role lacks.
   */
  private record TableState(
      List<String> missingColumns, List<String> missingPrivileges, @Nullable Lock lock) {
    static TableState locked(Lock lock) {
      return new TableState(List.of(), List.of(), lock);
    }
  }

  /** A lock on the table that its writes wait for, described; granted, or waiting itself. */
  private record Lock(String description, boolean granted) {}

  public ConsumerDedupHealthIndicator(JdbcDedupStore store) {
    this(store, null);
  }

  /** With the janitor whose last measured backlog is a detail, if this instance runs one. */
  public ConsumerDedupHealthIndicator(JdbcDedupStore store, @Nullable DedupJanitor janitor) {
    this(store, janitor, ConsumerDedupProperties.DEFAULT_HEALTH_TIMEOUT);
  }

  /**
   * @param timeout how long a check waits for the table's answer before it is DOWN
   * @throws IllegalArgumentException if {@code timeout} is not positive
   */
  public ConsumerDedupHealthIndicator(
      JdbcDedupStore store, @Nullable DedupJanitor janitor, Duration timeout) {
    this(store, janitor, timeout, null);
  }

  /**
   * @param timeout how long a check waits for the table's answer before it is DOWN
   * @param dataSource the DataSource of the table, in which a lock that holds its writes is looked
   *     for before they are tried (PostgreSQL); null not to look
   * @throws IllegalArgumentException if {@code timeout} is not positive
   */
  public ConsumerDedupHealthIndicator(
      JdbcDedupStore store,
      @Nullable DedupJanitor janitor,
      Duration timeout,
      @Nullable DataSource dataSource) {
    if (timeout.isNegative() || timeout.isZero()) {
      throw new IllegalArgumentException("timeout must be positive: " + timeout);
    }
    this.store = store;
    this.janitor = janitor;
    this.timeout = timeout;
    this.dataSource = dataSource;
    this.probes = dataSource == null ? store : probesGivingUpWithin(store, dataSource, timeout);
  }

  /**
   * A store over {@code dataSource} for the same table as {@code store}, whose statements the
   * database cancels after {@code timeout} (if the store's own timeout is not shorter): a probe
   * queued behind a lock held its pool connection up to the store's statement timeout, long after
   * the check had answered that the table did not answer.
   */
  private static JdbcDedupStore probesGivingUpWithin(
      JdbcDedupStore store, DataSource dataSource, Duration timeout) {
    JdbcDedupStore.Builder probes =
        JdbcDedupStore.builder(dataSource)
            .tableName(store.tableName())
            .statementTimeout(
                timeout.compareTo(store.statementTimeout()) < 0
                    ? timeout
                    : store.statementTimeout());
    store.dialect().ifPresent(probes::dialect);
    return probes.build();
  }

  @Override
  public Health health() {
    TableState state;
    try {
      state = check();
    } catch (DedupStoreException | DedupConfigurationException e) {
      return down(String.valueOf(e.getMessage()));
    } catch (TimeoutException e) {
      return down(
          "The dedup table did not answer within "
              + timeout.toMillis()
              + " ms: the connection pool is exhausted, the database does not answer, or"
              + " another transaction locks the table");
    } catch (RuntimeException | Error e) {
      // Anything else (a DataSource that throws a RuntimeException, such as a routing one without
      // a target for the check's thread; a thread that could not start): Spring Boot's health
      // endpoint does not catch what an indicator throws, so the whole health answered 500,
      // every other indicator's status with it, and no reason.
      return down("Could not ask the dedup table: " + e);
    }
    return checked(state);
  }

  private Health down(String reason) {
    return Health.down()
        .withDetail("table", store.tableName())
        .withDetail("reason", reason)
        .build();
  }

  /** What the table lacks, from the check running now or a new one, waited for briefly. */
  private TableState check() throws TimeoutException {
    CompletableFuture<TableState> check = running.get();
    if (check == null || check.isDone()) {
      CompletableFuture<TableState> fresh = new CompletableFuture<>();
      if (running.compareAndSet(check, fresh)) {
        Thread thread =
            new Thread(
                () -> {
                  try {
                    Lock lock = blockingLock();
                    if (lock != null) {
                      fresh.complete(TableState.locked(lock));
                      return;
                    }
                    List<String> columns = probes.missingColumnsNow();
                    // A role granted SELECT alone sees every column, and every claim of it is
                    // refused: the columns alone said UP.
                    fresh.complete(
                        new TableState(
                            columns,
                            columns.isEmpty() ? probes.missingPrivilegesNow() : List.of(),
                            null));
                  } catch (Throwable e) {
                    fresh.completeExceptionally(e);
                  }
                },
                "consumer-dedup-health");
        thread.setDaemon(true);
        try {
          thread.start();
        } catch (Throwable e) {
          // Left pending, it would be waited for by every later probe: DOWN for good.
          fresh.completeExceptionally(e);
        }
        check = fresh;
      } else {
        check = Objects.requireNonNull(running.get());
      }
    }
    try {
      return check.get(timeout.toNanos(), TimeUnit.NANOSECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new TimeoutException("interrupted");
    } catch (ExecutionException e) {
      Throwable cause = e.getCause();
      if (cause instanceof RuntimeException runtime) {
        throw runtime;
      }
      if (cause instanceof Error error) {
        throw error;
      }
      throw new IllegalStateException(cause);
    }
  }

  /**
   * The lock another transaction holds or waits for on the table that its writes would wait for;
   * null if there is none, the database is not PostgreSQL, or it cannot be asked (the probes then
   * meet what keeps it from answering).
   */
  private @Nullable Lock blockingLock() {
    DataSource source = dataSource;
    if (source == null
        || dialect().map(dialect -> dialect != SqlDialect.POSTGRESQL).orElse(false)) {
      return null;
    }
    Connection opened;
    try {
      opened = source.getConnection();
    } catch (SQLException | RuntimeException e) {
      // An outage, or a URL no driver accepts, which the probes name (a driver's message may carry
      // the URL and its password): not a look the role is kept from, and not logged here.
      return null;
    }
    try (Connection connection = opened) {
      String product = connection.getMetaData().getDatabaseProductName();
      if (product == null || !product.toLowerCase(Locale.ROOT).contains("postgres")) {
        return null;
      }
      try (PreparedStatement statement = connection.prepareStatement(BLOCKING_LOCKS)) {
        statement.setString(1, store.tableName());
        try (ResultSet lock = statement.executeQuery()) {
          if (!lock.next()) {
            return null;
          }
          String application = lock.getString(3);
          boolean granted = lock.getBoolean(4);
          String behind = lock.getString(5);
          return new Lock(
              lock.getString(1)
                  + (granted ? ", held by process " : ", wanted by process ")
                  + lock.getString(2)
                  + (application == null || application.isEmpty()
                      ? ""
                      : " (application '" + application + "')")
                  + (granted || behind == null || behind.isEmpty()
                      ? ""
                      : ", which waits behind process " + behind),
              granted);
        }
      }
    } catch (SQLException | RuntimeException e) {
      // The probes, through the store's own DataSource, say what keeps the table from answering;
      // a lock the look could have named is then met by them, and said as the table not answering.
      // Logged once: a role kept from pg_locks fails every look alike.
      if (lookFailureLogged.compareAndSet(false, true)) {
        log.warn(
            "Could not look for locks on the dedup table {} (pg_locks); the health check cannot"
                + " name a lock that holds it, and reports only that the table does not answer: {}",
            store.tableName(),
            e.toString());
      }
      return null;
    }
  }

  /** The table's dialect, known once the store or the probes have met the database. */
  private Optional<SqlDialect> dialect() {
    return store.dialect().or(probes::dialect);
  }

  private Health checked(TableState state) {
    String dialect = dialect().map(Enum::name).orElse("unknown");
    Lock lock = state.lock();
    if (lock != null) {
      return Health.down()
          .withDetail("table", store.tableName())
          .withDetail("dialect", dialect)
          .withDetail("lockedBy", lock.description())
          .withDetail(
              "reason",
              (lock.granted()
                      ? "The table is locked by another transaction ("
                      : "Another transaction waits for a lock on the table (")
                  + lock.description()
                  + "), which its claims and writes "
                  + (lock.granted() ? "wait for" : "queue behind")
                  + ": a migration's ALTER TABLE, a VACUUM"
                  + " FULL, a CREATE INDEX without CONCURRENTLY or a LOCK TABLE. Records are held"
                  + " until it ends, none skipped")
          .build();
    }
    List<String> missing = state.missingColumns();
    if (missing.isEmpty() && !state.missingPrivileges().isEmpty()) {
      return Health.down()
          .withDetail("table", store.tableName())
          .withDetail("dialect", dialect)
          .withDetail("missingPrivileges", state.missingPrivileges())
          .withDetail(
              "reason",
              "The DataSource's role lacks the privileges "
                  + String.join(", ", state.missingPrivileges())
                  + " on the table, and every claim needs them; grant them: GRANT SELECT, INSERT,"
                  + " UPDATE, DELETE ON "
                  + store.tableName()
                  + " TO <the application's role>")
          .build();
    }
    if (missing.isEmpty()) {
      Health.Builder up =
          Health.up().withDetail("table", store.tableName()).withDetail("dialect", dialect);
      if (janitor != null) {
        up.withDetail(
            "purge",
            janitor
                .lastBacklog()
                .<Object>map(ConsumerDedupEndpoint.BacklogView::of)
                .orElse(ConsumerDedupEndpoint.UNKNOWN_BACKLOG));
      }
      return up.build();
    }
    String schemaFile = dialect().orElse(SqlDialect.POSTGRESQL).schemaResource();
    boolean absent = missing.size() == JdbcDedupStore.EXPECTED_COLUMN_COUNT;
    return Health.down()
        .withDetail("table", store.tableName())
        .withDetail("dialect", dialect)
        .withDetail("missingColumns", missing)
        .withDetail(
            "reason",
            (absent ? "The table does not exist" : "The table lacks columns")
                + "; create it from the schema file "
                + schemaFile)
        .build();
  }
}
