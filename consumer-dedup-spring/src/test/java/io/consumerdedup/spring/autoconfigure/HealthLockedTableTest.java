package io.consumerdedup.spring.autoconfigure;

import static org.assertj.core.api.Assertions.as;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TestDatabase;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.UUID;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import javax.sql.DataSource;
import org.assertj.core.api.InstanceOfAssertFactories;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.health.contributor.Health;
import org.springframework.boot.health.contributor.Status;
import org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.jdbc.datasource.DriverManagerDataSource;

/**
 * Another transaction holds a lock on the dedup table that its writes wait for (a migration's
 * {@code ALTER TABLE}, a {@code VACUUM FULL}, an operator's {@code LOCK TABLE}): the health check's
 * probe statements queued behind it, holding a pool connection up to the store's statement timeout,
 * and each probe meanwhile answered DOWN with "the connection pool is exhausted, or the database
 * does not answer", neither of which was so. Now the check sees the lock without waiting for it and
 * says so. The auto-configured indicator, on a real PostgreSQL.
 */
@ExtendWith(OutputCaptureExtension.class)
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
   * A lock the look does not see (taken just after it; here one the look cannot see at all, the
   * role not allowed to read pg_locks): the probes queue behind it, and each held a pool connection
   * up to the store's statement timeout after the check had answered that the table did not answer.
   * Now the database cancels them once the check's timeout has passed, and the connection comes
   * back with the answer.
   */
  @Test
  void probesQueuedBehindALockTheLookDidNotSeeGiveTheirConnectionBackWithTheCheck()
      throws Exception {
    String database = newDatabase("dedup_health_unseen", null);
    String role = database + "_role";
    try {
      prepare(database, role, "REVOKE SELECT ON pg_catalog.pg_locks FROM PUBLIC");
      onTwoConnectionsTo(
              inDatabase(database) + "&user=" + role,
              "consumer-dedup.health-timeout=2s",
              "consumer-dedup.store.statement-timeout=60s")
          .run(
              context -> {
                ConsumerDedupHealthIndicator health =
                    context.getBean(ConsumerDedupHealthIndicator.class);
                HikariDataSource pool = context.getBean(HikariDataSource.class);
                assertThat(health.health().getStatus()).as("health, unlocked").isEqualTo(Status.UP);

                try (Connection locker = DriverManager.getConnection(inDatabase(database));
                    Statement statement = locker.createStatement()) {
                  locker.setAutoCommit(false);
                  statement.execute("LOCK TABLE consumer_dedup IN ACCESS EXCLUSIVE MODE");

                  Health unseen = health.health();

                  assertThat(unseen.getStatus())
                      .as("health while a lock the look does not see holds the table (%s)", unseen)
                      .isEqualTo(Status.DOWN);
                  await()
                      .atMost(Duration.ofSeconds(5))
                      .untilAsserted(
                          () ->
                              assertThat(pool.getHikariPoolMXBean().getActiveConnections())
                                  .as(
                                      "pool connections in use after the health check answered"
                                          + " (statements waiting for the table's lock: %s)",
                                      waitingOnTheTable(statement))
                                  .isZero());
                  locker.rollback();
                }
                await("health once the lock is gone")
                    .atMost(Duration.ofSeconds(15))
                    .until(() -> health.health().getStatus().equals(Status.UP));
              });
    } finally {
      dropDatabase(database, role);
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

  /**
   * pg_locks lists the locks of every database of the server, and databases made from one template
   * give their tables the same OIDs: a migration's lock on one tenant's table made the health of
   * every other tenant's DOWN.
   */
  @Test
  void aLockOnTheTableOfAnotherDatabaseLeavesTheHealthUp() throws Exception {
    String tenantA = newDatabase("dedup_health_a", null);
    String tenantB = null;
    try {
      try (Connection connection = DriverManager.getConnection(inDatabase(tenantA));
          Statement statement = connection.createStatement()) {
        statement.execute(TestDatabase.schemaDdl());
      }
      tenantB = newDatabase("dedup_health_b", tenantA);
      onTwoConnectionsTo(inDatabase(tenantB), "consumer-dedup.health-timeout=3s")
          .run(
              context -> {
                ConsumerDedupHealthIndicator health =
                    context.getBean(ConsumerDedupHealthIndicator.class);
                assertThat(health.health().getStatus()).as("health, unlocked").isEqualTo(Status.UP);

                try (Connection locker = DriverManager.getConnection(inDatabase(tenantA));
                    Statement statement = locker.createStatement()) {
                  locker.setAutoCommit(false);
                  statement.execute("LOCK TABLE consumer_dedup IN ACCESS EXCLUSIVE MODE");
                  Health elsewhere = health.health();

                  assertThat(elsewhere.getStatus())
                      .as("health while the table of another database is locked (%s)", elsewhere)
                      .isEqualTo(Status.UP);
                  locker.rollback();
                }
              });
    } finally {
      dropDatabase(tenantB, null);
      dropDatabase(tenantA, null);
    }
  }

  /**
   * A role that may not run {@code pg_blocking_pids} (EXECUTE revoked, as some hardened servers
   * do): the look failed whole, granted locks too, without a word, and the probes waited behind the
   * lock for the check's timeout.
   */
  @Test
  void aLockIsNamedWhereTheRoleMayNotRunPgBlockingPids() throws Exception {
    String database = newDatabase("dedup_health_nopids", null);
    String role = database + "_role";
    try {
      prepare(database, role, "REVOKE EXECUTE ON FUNCTION pg_blocking_pids(integer) FROM PUBLIC");
      onTwoConnectionsTo(inDatabase(database) + "&user=" + role, "consumer-dedup.health-timeout=3s")
          .run(
              context -> {
                ConsumerDedupHealthIndicator health =
                    context.getBean(ConsumerDedupHealthIndicator.class);
                assertThat(health.health().getStatus()).as("health, unlocked").isEqualTo(Status.UP);

                try (Connection locker = DriverManager.getConnection(inDatabase(database));
                    Statement statement = locker.createStatement()) {
                  locker.setAutoCommit(false);
                  statement.execute("LOCK TABLE consumer_dedup IN ACCESS EXCLUSIVE MODE");
                  Health locked = health.health();

                  assertThat(String.valueOf(locked.getDetails().get("reason")))
                      .as("reason of the health while another transaction locks the table")
                      .contains("locked by another transaction")
                      .contains("AccessExclusiveLock");
                  locker.rollback();
                }
              });
    } finally {
      dropDatabase(database, role);
    }
  }

  /**
   * A look the role may not run at all (pg_locks itself not readable) is said once at WARN, and the
   * probes still answer.
   */
  @Test
  void aLookTheRoleMayNotRunIsLoggedOnceAndTheProbesStillAnswer(CapturedOutput output)
      throws Exception {
    String database = newDatabase("dedup_health_nolocks", null);
    String role = database + "_role";
    try {
      prepare(database, role, "REVOKE SELECT ON pg_catalog.pg_locks FROM PUBLIC");
      onTwoConnectionsTo(inDatabase(database) + "&user=" + role)
          .run(
              context -> {
                ConsumerDedupHealthIndicator health =
                    context.getBean(ConsumerDedupHealthIndicator.class);

                assertThat(health.health().getStatus()).as("health").isEqualTo(Status.UP);
                assertThat(health.health().getStatus()).as("health again").isEqualTo(Status.UP);
              });

      assertThat(output.getAll().split("\\R"))
          .as("lines logged")
          .filteredOn(line -> line.contains("Could not look for locks on the dedup table"))
          .singleElement(as(InstanceOfAssertFactories.STRING))
          .contains("WARN")
          .contains("permission denied");
    } finally {
      dropDatabase(database, role);
    }
  }

  /**
   * A URL pgjdbc cannot parse (a password with a {@code %} not followed by two hex digits): the
   * look's failure to get a connection was logged at WARN with the driver's message, which quotes
   * the URL, password and all. The probes meet the same refusal and name it, the URL cut before its
   * parameters. Built by hand: auto-configured, the application does not start over such a URL (the
   * table's verifier refuses it), and an indicator built over the DataSource still meets it.
   */
  @Test
  void aUrlTheDriverCannotParseIsDownWithoutThePasswordInTheHealthOrTheLog(CapturedOutput output) {
    String password = "50%off";
    String base = TestDatabase.baseUrl();
    DataSource unparsable =
        new DriverManagerDataSource(
            base + (base.contains("?") ? "&" : "?") + "password=" + password);
    ConsumerDedupHealthIndicator health =
        new ConsumerDedupHealthIndicator(
            JdbcDedupStore.builder(unparsable).build(), null, Duration.ofSeconds(3), unparsable);

    Health refused = health.health();

    assertThat(refused.getStatus()).as("health (%s)", refused).isEqualTo(Status.DOWN);
    assertThat(String.valueOf(refused.getDetails().get("reason")))
        .as("reason of the health")
        .contains("No JDBC driver accepts the URL of the dedup table's DataSource")
        .contains("the rest of it is not shown");
    assertThat(String.valueOf(refused)).as("health").doesNotContain(password);
    assertThat(String.valueOf(health.health()))
        .as("health, checked again")
        .doesNotContain(password);
    assertThat(output.getAll().split("\\R"))
        .as("lines logged")
        .noneMatch(line -> line.contains(password));
  }

  /** A database of its own, copied from {@code template} when given; returns its name. */
  private static String newDatabase(String prefix, @Nullable String template) throws SQLException {
    String database = prefix + "_" + UUID.randomUUID().toString().substring(0, 8);
    try (Connection connection = DriverManager.getConnection(TestDatabase.baseUrl());
        Statement statement = connection.createStatement()) {
      statement.execute(
          "CREATE DATABASE " + database + (template == null ? "" : " TEMPLATE " + template));
    }
    return database;
  }

  /**
   * The dedup table in {@code database}, {@code role} granted what the store needs on it, and
   * {@code revoke} run there.
   */
  private static void prepare(String database, String role, String revoke) throws SQLException {
    try (Connection connection = DriverManager.getConnection(inDatabase(database));
        Statement statement = connection.createStatement()) {
      statement.execute(TestDatabase.schemaDdl());
      statement.execute("CREATE ROLE " + role + " LOGIN");
      statement.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON consumer_dedup TO " + role);
      statement.execute(revoke);
    }
  }

  private static void dropDatabase(@Nullable String database, @Nullable String role)
      throws SQLException {
    try (Connection connection = DriverManager.getConnection(TestDatabase.baseUrl());
        Statement statement = connection.createStatement()) {
      if (database != null) {
        statement.execute("DROP DATABASE IF EXISTS " + database + " WITH (FORCE)");
      }
      if (role != null) {
        statement.execute("DROP ROLE IF EXISTS " + role);
      }
    }
  }

  /** The server's URL with {@code database} in place of its database. */
  private static String inDatabase(String database) {
    return TestDatabase.baseUrl().replaceFirst("(//[^/?]+/)[^?]*", "$1" + database);
  }

  private static int pid(Statement statement) throws SQLException {
    try (ResultSet pid = statement.executeQuery("SELECT pg_backend_pid()")) {
      pid.next();
      return pid.getInt(1);
    }
  }

  /** The auto-configured indicator over a pool of two connections to {@code schema}. */
  private static ApplicationContextRunner onTwoConnections(String schema, String... properties) {
    return onTwoConnectionsTo(TestDatabase.url(schema), properties);
  }

  /** The auto-configured indicator over a pool of two connections to {@code url}. */
  private static ApplicationContextRunner onTwoConnectionsTo(String url, String... properties) {
    return new ApplicationContextRunner()
        .withConfiguration(
            AutoConfigurations.of(
                DataSourceAutoConfiguration.class,
                ConsumerDedupAutoConfiguration.class,
                ConsumerDedupActuatorAutoConfiguration.class))
        .withPropertyValues(
            "spring.datasource.url=" + url, "spring.datasource.hikari.maximum-pool-size=2")
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
