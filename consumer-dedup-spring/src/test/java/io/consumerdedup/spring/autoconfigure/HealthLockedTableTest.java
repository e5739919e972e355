package io.consumerdedup.spring.autoconfigure;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.testing.TestDatabase;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.health.contributor.Health;
import org.springframework.boot.health.contributor.Status;
import org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;

/**
 * Another transaction holds a lock on the dedup table that its writes wait for (a migration's
 * {@code ALTER TABLE}, a {@code VACUUM FULL}, an operator's {@code LOCK TABLE}): the health check's
 * probe statements queued behind it, holding a pool connection up to the store's statement timeout,
 * and each probe meanwhile answered DOWN with "the connection pool is exhausted, or the database
 * does not answer", neither of which was so. Now the check sees the lock without waiting for it and
 * says so. The auto-configured indicator, on a real PostgreSQL.
 */
class HealthLockedTableTest {

  @Test
  void aTableLockedByAnotherTransactionIsDownAtOnceSayingSoWithoutWaitingForTheLock()
      throws Exception {
    String schema = TestDatabase.newSchema("healthlocked");
    try {
      // Above the default 800 ms, so that a loaded machine does not answer DOWN for the time it
      // took; still below the store's statement timeout (5 s), which a probe queued behind the
      // lock would wait for.
      onTwoConnections(schema, "consumer-dedup.health-timeout=3s")
          .run(
              context -> {
                ConsumerDedupHealthIndicator health =
                    context.getBean(ConsumerDedupHealthIndicator.class);
                assertThat(health.health().getStatus()).as("health, unlocked").isEqualTo(Status.UP);

                try (Connection locker = TestDatabase.connect(schema);
                    Statement statement = locker.createStatement()) {
                  locker.setAutoCommit(false);
                  statement.execute("LOCK TABLE consumer_dedup IN ACCESS EXCLUSIVE MODE");
                  Health locked = health.health();

                  assertThat(locked.getStatus())
                      .as("health while another transaction locks the table (%s)", locked)
                      .isEqualTo(Status.DOWN);
                  assertThat(String.valueOf(locked.getDetails().get("reason")))
                      .as("reason of the health while another transaction locks the table")
                      .contains("locked by another transaction")
                      .contains("AccessExclusiveLock");
                  assertThat(waitingOnTheTable(statement))
                      .as("statements waiting for the table's lock after the health check")
                      .isZero();
                  locker.rollback();
                }
                await("health once the lock is gone")
                    .atMost(Duration.ofSeconds(15))
                    .until(() -> health.health().getStatus().equals(Status.UP));
              });
    } finally {
      TestDatabase.dropSchema(schema);
    }
  }

  /**
   * A migration's lock queued behind a long read of the table (not granted yet, it still makes
   * every later statement on the table queue behind it): the probes queued behind it, and each held
   * a pool connection up to the store's statement timeout after the check had answered that the
   * table did not answer. Now no connection stays in use once the check has answered (the look
   * names the waiting lock, {@link #aMigrationQueuedBehindALongReadIsNamedWithTheReadItWaitsFor}),
   * and once the migration's lock is granted the next check names it as held.
   */
  @Test
  void probesQueuedBehindALockTheLookDidNotSeeGiveTheirConnectionBackWithTheCheck()
      throws Exception {
    String schema = TestDatabase.newSchema("healthqueued");
    ExecutorService migrationThread = Executors.newSingleThreadExecutor();
    try {
      onTwoConnections(
              schema,
              "consumer-dedup.health-timeout=2s",
              "consumer-dedup.store.statement-timeout=60s")
          .run(
              context -> {
                ConsumerDedupHealthIndicator health =
                    context.getBean(ConsumerDedupHealthIndicator.class);
                HikariDataSource pool = context.getBean(HikariDataSource.class);
                assertThat(health.health().getStatus()).as("health, unlocked").isEqualTo(Status.UP);

                try (Connection reader = TestDatabase.connect(schema);
                    Statement read = reader.createStatement();
                    Connection migration = TestDatabase.connect(schema);
                    Statement migrate = migration.createStatement()) {
                  reader.setAutoCommit(false);
                  read.execute("SELECT count(*) FROM consumer_dedup");
                  migration.setAutoCommit(false);
                  Future<?> locked =
                      migrationThread.submit(
                          () -> {
                            migrate.execute("LOCK TABLE consumer_dedup IN ACCESS EXCLUSIVE MODE");
                            return null;
                          });
                  await("the migration's lock queued behind the read")
                      .atMost(Duration.ofSeconds(15))
                      .until(() -> waitingOnTheTable(read) == 1);

                  Health queued = health.health();

                  assertThat(queued.getStatus())
                      .as("health while a migration's lock is queued (%s)", queued)
                      .isEqualTo(Status.DOWN);
                  await()
                      .atMost(Duration.ofSeconds(5))
                      .untilAsserted(
                          () ->
                              assertThat(pool.getHikariPoolMXBean().getActiveConnections())
                                  .as(
                                      "pool connections in use after the health check answered"
                                          + " (statements waiting for the table's lock: %s)",
                                      waitingOnTheTable(read))
                                  .isZero());

                  reader.rollback();
                  locked.get(15, TimeUnit.SECONDS);
                  Health granted = health.health();
                  assertThat(String.valueOf(granted.getDetails().get("reason")))
                      .as("reason of the health once the migration's lock is granted")
                      .contains("locked by another transaction")
                      .contains("AccessExclusiveLock");
                  migration.rollback();
                }
              });
    } finally {
      migrationThread.shutdownNow();
      TestDatabase.dropSchema(schema);
    }
  }

  /**
   * A migration's ALTER TABLE queued behind a long read of the table: not granted yet, it makes
   * every later claim queue behind it, so records are held as if it held the table. The look saw
   * granted locks only, and the check waited out its timeout to say that the table did not answer,
   * naming neither the migration nor the read it waits for.
   */
  @Test
  void aMigrationQueuedBehindALongReadIsNamedWithTheReadItWaitsFor() throws Exception {
    String schema = TestDatabase.newSchema("healthwaiting");
    ExecutorService migrationThread = Executors.newSingleThreadExecutor();
    try {
      onTwoConnections(schema, "consumer-dedup.health-timeout=3s")
          .run(
              context -> {
                ConsumerDedupHealthIndicator health =
                    context.getBean(ConsumerDedupHealthIndicator.class);
                assertThat(health.health().getStatus()).as("health, unlocked").isEqualTo(Status.UP);

                try (Connection reader = TestDatabase.connect(schema);
                    Statement read = reader.createStatement();
                    Connection migration = TestDatabase.connect(schema);
                    Statement migrate = migration.createStatement()) {
                  reader.setAutoCommit(false);
                  read.execute("SELECT count(*) FROM consumer_dedup");
                  int readerPid = pid(read);
                  int migrationPid = pid(migrate);
                  migration.setAutoCommit(false);
                  Future<?> altered =
                      migrationThread.submit(
                          () -> {
                            migrate.execute("ALTER TABLE consumer_dedup ADD COLUMN note text");
                            return null;
                          });
                  await("the migration queued behind the read")
                      .atMost(Duration.ofSeconds(15))
                      .until(() -> waitingOnTheTable(read) == 1);

                  Health queued = health.health();

                  assertThat(queued.getStatus())
                      .as("health while a migration waits behind a read (%s)", queued)
                      .isEqualTo(Status.DOWN);
                  assertThat(String.valueOf(queued.getDetails().get("reason")))
                      .as("reason of the health while a migration waits behind a read")
                      .contains("AccessExclusiveLock")
                      .contains("process " + migrationPid)
                      .contains("behind process " + readerPid);
                  reader.rollback();
                  altered.get(15, TimeUnit.SECONDS);
                  migration.rollback();
                }
              });
    } finally {
      migrationThread.shutdownNow();
      TestDatabase.dropSchema(schema);
    }
  }

  private static int pid(Statement statement) throws SQLException {
    try (ResultSet pid = statement.executeQuery("SELECT pg_backend_pid()")) {
      pid.next();
      return pid.getInt(1);
    }
  }

  /** The auto-configured indicator over a pool of two connections to {@code schema}. */
  private static ApplicationContextRunner onTwoConnections(String schema, String... properties) {
    return new ApplicationContextRunner()
        .withConfiguration(
            AutoConfigurations.of(
                DataSourceAutoConfiguration.class,
                ConsumerDedupAutoConfiguration.class,
                ConsumerDedupActuatorAutoConfiguration.class))
        .withPropertyValues(
            "spring.datasource.url=" + TestDatabase.url(schema),
            "spring.datasource.hikari.maximum-pool-size=2")
        .withPropertyValues(properties);
  }

  private static int waitingOnTheTable(Statement statement) throws SQLException {
    try (ResultSet waiting =
        statement.executeQuery(
            "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'relation'"
                + " AND relation = to_regclass('consumer_dedup')")) {
      waiting.next();
      return waiting.getInt(1);
    }
  }
}
