package io.consumerdedup.spring.autoconfigure;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

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
 * The processes the health check names as those a waiting lock on the dedup table waits behind: an
 * operator kills the process named, so it must be one that blocks. The look named every process
 * holding any lock on the table, a plain reader's too, whose lock does not conflict with the one
 * waiting. On a real PostgreSQL.
 */
class HealthLockHoldersTest {

  /**
   * A {@code CREATE INDEX} (a SHARE lock, which every later claim queues behind) waits for a
   * transaction that wrote to the table; a reader holds the table too, and does not hold the index
   * up: PostgreSQL lets a SHARE lock beside an ACCESS SHARE one.
   */
  @Test
  void aWaitingLockIsNamedWithTheWriterItWaitsForAndNotWithAReaderBesideIt() throws Exception {
    String schema = TestDatabase.newSchema("healthholders");
    ExecutorService indexThread = Executors.newSingleThreadExecutor();
    try {
      onTwoConnections(schema, "consumer-dedup.health-timeout=3s")
          .run(
              context -> {
                ConsumerDedupHealthIndicator health =
                    context.getBean(ConsumerDedupHealthIndicator.class);
                assertThat(health.health().getStatus()).as("health, unlocked").isEqualTo(Status.UP);

                try (Connection reader = TestDatabase.connect(schema);
                    Statement read = reader.createStatement();
                    Connection writer = TestDatabase.connect(schema);
                    Statement write = writer.createStatement();
                    Connection indexer = TestDatabase.connect(schema);
                    Statement index = indexer.createStatement()) {
                  reader.setAutoCommit(false);
                  read.execute("SELECT count(*) FROM consumer_dedup");
                  writer.setAutoCommit(false);
                  write.execute("DELETE FROM consumer_dedup WHERE false");
                  int readerPid = pid(read);
                  int writerPid = pid(write);
                  int indexerPid = pid(index);
                  Future<?> indexed =
                      indexThread.submit(
                          () -> {
                            index.execute("CREATE INDEX note_idx ON consumer_dedup (biz_type)");
                            return null;
                          });
                  await("the index queued behind the writer")
                      .atMost(Duration.ofSeconds(15))
                      .until(() -> waitingOnTheTable(read) == 1);

                  Health queued = health.health();

                  assertThat(queued.getStatus())
                      .as("health while an index waits behind a writer (%s)", queued)
                      .isEqualTo(Status.DOWN);
                  assertThat(String.valueOf(queued.getDetails().get("lockedBy")))
                      .as(
                          "the lock named by the health check (index %s, writer %s, reader %s)",
                          indexerPid, writerPid, readerPid)
                      .startsWith("ShareLock, wanted by process " + indexerPid)
                      .endsWith(", which waits behind process " + writerPid);
                  writer.rollback();
                  indexed.get(15, TimeUnit.SECONDS);
                  reader.rollback();
                }
              });
    } finally {
      indexThread.shutdownNow();
      TestDatabase.dropSchema(schema);
    }
  }

  /**
   * A {@code CREATE INDEX} queued behind a waiting {@code ALTER TABLE}, itself waiting for a long
   * read: no granted lock conflicts with the index's SHARE (the read's ACCESS SHARE does not), and
   * the look, which picks the waiting lock of the lowest process id, named no one it waited behind.
   * The long read, which holds both up, is named.
   */
  @Test
  void aLockQueuedBehindAnotherWaitingLockNamesTheLongReadThatHoldsBothUp() throws Exception {
    String schema = TestDatabase.newSchema("healthqueued");
    ExecutorService waiters = Executors.newFixedThreadPool(2);
    try {
      onTwoConnections(schema, "consumer-dedup.health-timeout=3s")
          .run(
              context -> {
                ConsumerDedupHealthIndicator health =
                    context.getBean(ConsumerDedupHealthIndicator.class);
                try (Connection indexer = TestDatabase.connect(schema);
                    Statement index = indexer.createStatement();
                    Connection reader = TestDatabase.connect(schema);
                    Statement read = reader.createStatement();
                    Connection alterer = TestDatabase.connect(schema);
                    Statement alter = alterer.createStatement()) {
                  int indexerPid = pid(index);
                  int readerPid = pid(read);
                  int altererPid = pid(alter);
                  assertThat(indexerPid)
                      .as("the index's process id, below the ALTER's: the look picks it")
                      .isLessThan(altererPid);
                  reader.setAutoCommit(false);
                  read.execute("SELECT count(*) FROM consumer_dedup");
                  Future<?> altered =
                      waiters.submit(
                          () -> alter.execute("ALTER TABLE consumer_dedup ADD COLUMN note text"));
                  await("the ALTER TABLE queued behind the read")
                      .atMost(Duration.ofSeconds(15))
                      .until(() -> waitingOnTheTable(read) == 1);
                  Future<?> indexed =
                      waiters.submit(
                          () ->
                              index.execute("CREATE INDEX note_idx ON consumer_dedup (biz_type)"));
                  await("the index queued behind the ALTER TABLE")
                      .atMost(Duration.ofSeconds(15))
                      .until(() -> waitingOnTheTable(read) == 2);

                  Health queued = health.health();

                  assertThat(queued.getStatus())
                      .as("health while two locks wait behind a read (%s)", queued)
                      .isEqualTo(Status.DOWN);
                  assertThat(String.valueOf(queued.getDetails().get("lockedBy")))
                      .as(
                          "the lock named by the health check (index %s, ALTER %s, read %s)",
                          indexerPid, altererPid, readerPid)
                      .startsWith("ShareLock, wanted by process " + indexerPid)
                      .endsWith(", which waits behind process " + readerPid);
                  reader.rollback();
                  altered.get(15, TimeUnit.SECONDS);
                  indexed.get(15, TimeUnit.SECONDS);
                }
              });
    } finally {
      waiters.shutdownNow();
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
