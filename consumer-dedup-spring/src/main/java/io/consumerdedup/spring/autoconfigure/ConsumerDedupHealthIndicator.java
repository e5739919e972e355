package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.jdbc.DedupJanitor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.jdbc.SqlDialect;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicReference;
import org.jspecify.annotations.Nullable;
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
 */
public class ConsumerDedupHealthIndicator implements HealthIndicator {
  private final JdbcDedupStore store;
  private final @Nullable DedupJanitor janitor;
  private final Duration timeout;
  private final AtomicReference<@Nullable CompletableFuture<TableState>> running =
      new AtomicReference<>();

  /**
   * What a check found: the columns the store needs that the table lacks, and, when it has them
   * all, the privileges on it that the DataSource's role lacks.
   */
  private record TableState(List<String> missingColumns, List<String> missingPrivileges) {}

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
    if (timeout.isNegative() || timeout.isZero()) {
      throw new IllegalArgumentException("timeout must be positive: " + timeout);
    }
    this.store = store;
    this.janitor = janitor;
    this.timeout = timeout;
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
              + " ms: the connection pool is exhausted, or the database does not answer");
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
                    List<String> columns = store.missingColumnsNow();
                    // A role granted SELECT alone sees every column, and every claim of it is
                    // refused: the columns alone said UP.
                    fresh.complete(
                        new TableState(
                            columns, columns.isEmpty() ? store.missingPrivilegesNow() : List.of()));
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

  private Health checked(TableState state) {
    String dialect = store.dialect().map(Enum::name).orElse("unknown");
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
    String schemaFile = store.dialect().orElse(SqlDialect.POSTGRESQL).schemaResource();
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
