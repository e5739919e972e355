package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.ConnectionSource;
import io.consumerdedup.testing.TestDatabase;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicInteger;
import org.awaitility.Awaitility;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** A connection terminated by the server (pg_terminate_backend) during a claim is retried. */
class TransientDatabaseErrorTest {
  private static String schema;

  @BeforeAll
  static void setUp() {
    schema = TestDatabase.newSchema("transient");
  }

  @AfterAll
  static void tearDown() {
    TestDatabase.dropSchema(schema);
  }

  @Test
  void aClaimWhoseConnectionIsTerminatedIsRetriedAndTheHandlerRunsOnce() throws Exception {
    TerminatingDataSource dataSource = new TerminatingDataSource();
    JdbcDedupStore store =
        JdbcDedupStore.builder(dataSource).retryInitialBackoff(Duration.ofMillis(20)).build();
    AtomicInteger charges = new AtomicInteger();
    DedupKey key = DedupKey.of("payment", "ORD-transient-1");

    try (IdempotentExecutor executor = IdempotentExecutor.builder(store).build()) {
      // Armed after the build, whose table check takes a connection of its own.
      dataSource.armed = true;
      DedupResult<Integer> result = executor.execute(key, charges::incrementAndGet);

      assertThat(result.outcome()).isEqualTo(Outcome.PROCESSED);
      assertThat(result.attempt()).isEqualTo(1);
    }
    assertThat(charges).hasValue(1);
    assertThat(dataSource.terminated).as("connections terminated under the claim").hasValue(1);
    assertThat(store.retry().getMetrics().getNumberOfSuccessfulCallsWithRetryAttempt())
        .isEqualTo(1);
    assertThat(store.find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
  }

  /**
   * Hands out real connections; once armed, the first one's server process is terminated by an
   * administrator (pg_terminate_backend) before it is used, as when a database fails over or kills
   * idle sessions.
   */
  private static final class TerminatingDataSource extends ConnectionSource {
    final AtomicInteger terminated = new AtomicInteger();
    volatile boolean armed;

    @Override
    public Connection getConnection() throws SQLException {
      Connection connection = TestDatabase.connect(schema);
      if (armed && terminated.compareAndSet(0, 1)) {
        int pid;
        try (PreparedStatement statement = connection.prepareStatement("SELECT pg_backend_pid()");
            ResultSet row = statement.executeQuery()) {
          row.next();
          pid = row.getInt(1);
        }
        try (Connection admin = TestDatabase.connect(schema);
            PreparedStatement kill = admin.prepareStatement("SELECT pg_terminate_backend(?)")) {
          kill.setInt(1, pid);
          kill.execute();
          Awaitility.await().atMost(Duration.ofSeconds(10)).until(() -> !backendAlive(admin, pid));
        }
      }
      return connection;
    }

    private static boolean backendAlive(Connection admin, int pid) throws SQLException {
      try (PreparedStatement statement =
          admin.prepareStatement("SELECT count(*) FROM pg_stat_activity WHERE pid = ?")) {
        statement.setInt(1, pid);
        try (ResultSet row = statement.executeQuery()) {
          row.next();
          return row.getInt(1) > 0;
        }
      }
    }
  }
}
