package io.consumerdedup.spring.autoconfigure;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.ConnectionSource;
import io.consumerdedup.testing.TestDatabase;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.boot.health.contributor.Health;
import org.springframework.boot.health.contributor.Status;

/**
 * The {@code consumerdedup} health check when asking the table fails with something other than a
 * database error: a DataSource that throws a {@code RuntimeException} (Spring's {@code
 * AbstractRoutingDataSource} when the check's thread carries no lookup key), or an {@code Error}.
 * Spring Boot's health endpoint does not catch what an indicator throws: the whole {@code
 * /actuator/health} answered 500, every other indicator's status lost with it, and no reason. The
 * check must answer DOWN with the reason, and UP again once the table answers.
 */
class HealthUnexpectedFailureTest {
  private String schema;
  private HikariDataSource pool;
  private final AtomicBoolean failing = new AtomicBoolean();
  private ConsumerDedupHealthIndicator health;

  @BeforeEach
  void setUp() {
    schema = TestDatabase.newSchema("healthunexpected");
    pool = TestDatabase.dataSource(schema, 2);
    ConnectionSource routing =
        new ConnectionSource() {
          @Override
          public Connection getConnection() throws SQLException {
            if (failing.get()) {
              // What AbstractRoutingDataSource throws without a target for the thread's key.
              throw new IllegalStateException(
                  "Cannot determine target DataSource for lookup key [null]");
            }
            return pool.getConnection();
          }
        };
    health = new ConsumerDedupHealthIndicator(JdbcDedupStore.builder(routing).build());
  }

  @AfterEach
  void tearDown() {
    pool.close();
    TestDatabase.dropSchema(schema);
  }

  @Test
  void aDataSourceThatThrowsARuntimeExceptionIsDownWithTheReasonNotThrownOutOfTheHealthEndpoint() {
    assertThat(health.health().getStatus())
        .as("health while the table answers")
        .isEqualTo(Status.UP);

    failing.set(true);
    Health[] answer = new Health[1];
    Throwable thrown = catchThrowable(() -> answer[0] = health.health());

    assertThat(thrown).as("what the health check threw at Spring Boot's health endpoint").isNull();
    assertThat(answer[0].getStatus()).isEqualTo(Status.DOWN);
    assertThat(String.valueOf(answer[0].getDetails().get("reason")))
        .contains("IllegalStateException")
        .contains("Cannot determine target DataSource");

    failing.set(false);
    assertThat(health.health().getStatus())
        .as("health once the table answers again")
        .isEqualTo(Status.UP);
  }
}
