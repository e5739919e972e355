package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.catchThrowable;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.testing.ConnectionSource;
import io.consumerdedup.testing.TestDatabase;
import java.net.ServerSocket;
import java.sql.Connection;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A JDBC URL that no driver accepts ({@code jdbc:postgres:} for {@code jdbc:postgresql:}, or the
 * driver's jar left out) can never give a connection, yet building an executor over it logged that
 * records wait until the database answers, and the program ran, every record waiting for a database
 * that was never asked. A database that is down still only logs: records wait for it.
 */
class NoDriverAcceptsUrlTest {

  @ParameterizedTest(name = "driver class named: {0}")
  @ValueSource(booleans = {false, true})
  void anExecutorOverAUrlNoDriverAcceptsIsNotBuilt(boolean driverClassNamed) {
    String url =
        TestDatabase.baseUrl().replace("jdbc:postgresql:", "jdbc:postgres:") + "&password=hunter2";
    try (HikariDataSource pool = pool(url, driverClassNamed)) {
      JdbcDedupStore store = JdbcDedupStore.builder(pool).build();

      assertThatThrownBy(() -> IdempotentExecutor.builder(store).build().close())
          .isInstanceOf(DedupConfigurationException.class)
          .hasMessageContaining("No JDBC driver accepts the URL of the dedup table's DataSource")
          .hasMessageContaining("jdbc:postgres:")
          .hasMessageContaining("(the rest of it is not shown: it may hold a password)")
          .hasMessageNotContaining("hunter2")
          .hasMessageContaining("not an outage");
    }
  }

  @ParameterizedTest(name = "driver class named: {0}")
  @ValueSource(booleans = {false, true})
  void anExecutorOverADatabaseThatIsDownIsBuiltAndRecordsWait(boolean driverClassNamed)
      throws Exception {
    int closedPort;
    try (ServerSocket socket = new ServerSocket(0)) {
      closedPort = socket.getLocalPort();
    }
    try (HikariDataSource pool =
        pool(
            "jdbc:postgresql://127.0.0.1:" + closedPort + "/test?user=postgres",
            driverClassNamed)) {
      JdbcDedupStore store = JdbcDedupStore.builder(pool).retryMaxAttempts(1).build();

      try (IdempotentExecutor executor = IdempotentExecutor.builder(store).build()) {
        assertThat(executor).isNotNull();
      }
    }
  }

  /**
   * The refusal is told by the messages of the failure's causes: one whose {@code getMessage()}
   * throws is no refusal, and no reason to stop the build that a database outage does not stop.
   */
  @Test
  void aConnectionFailureWhoseMessageCannotBeReadIsStillOnlyAnOutage() {
    ConnectionSource unprintable =
        new ConnectionSource() {
          @Override
          public Connection getConnection() {
            throw new IllegalStateException() {
              @Override
              public String getMessage() {
                throw new UnsupportedOperationException("no message");
              }
            };
          }
        };
    JdbcDedupStore store = JdbcDedupStore.builder(unprintable).build();

    Throwable thrown = catchThrowable(() -> IdempotentExecutor.builder(store).build().close());

    assertThat(thrown).as("what building threw").isNull();
  }

  private static HikariDataSource pool(String url, boolean driverClassNamed) {
    HikariDataSource pool = new HikariDataSource();
    if (driverClassNamed) {
      pool.setDriverClassName("org.postgresql.Driver");
    }
    pool.setJdbcUrl(url);
    pool.setMaximumPoolSize(1);
    pool.setConnectionTimeout(250);
    return pool;
  }
}
