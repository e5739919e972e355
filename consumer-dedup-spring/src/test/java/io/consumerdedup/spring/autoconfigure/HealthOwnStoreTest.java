package io.consumerdedup.spring.autoconfigure;

import static org.assertj.core.api.Assertions.assertThat;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TestDatabase;
import java.sql.Connection;
import java.sql.Statement;
import org.junit.jupiter.api.Test;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.health.contributor.Health;
import org.springframework.boot.health.contributor.Status;
import org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;

/**
 * The application declares a {@link JdbcDedupStore} of its own over a DataSource that is not its
 * primary one (here a pool made in the bean method, as for a second database). The health check ran
 * its probes over the DataSource consumer-dedup would have picked, the primary one, where no dedup
 * table is: DOWN "table missing" for a table that works, and readiness failing with it.
 */
class HealthOwnStoreTest {

  @Test
  void aStoreOfTheApplicationsOwnIsCheckedOnItsOwnDataSource() throws Exception {
    String primary = TestDatabase.newSchema("healthprimary");
    String dedup = TestDatabase.newSchema("healthownstore");
    try (Connection connection = TestDatabase.connect(primary);
        Statement statement = connection.createStatement()) {
      statement.execute("DROP TABLE consumer_dedup"); // the primary database has no dedup table
    }
    try (HikariDataSource dedupPool = TestDatabase.dataSource(dedup, 2)) {
      new ApplicationContextRunner()
          .withConfiguration(
              AutoConfigurations.of(
                  DataSourceAutoConfiguration.class,
                  ConsumerDedupAutoConfiguration.class,
                  ConsumerDedupActuatorAutoConfiguration.class))
          .withPropertyValues(
              "spring.datasource.url=" + TestDatabase.url(primary),
              "consumer-dedup.health-timeout=3s")
          .withBean(JdbcDedupStore.class, () -> JdbcDedupStore.builder(dedupPool).build())
          .run(
              context -> {
                assertThat(context).hasNotFailed();
                Health health = context.getBean(ConsumerDedupHealthIndicator.class).health();

                assertThat(health.getStatus())
                    .as("health of the application's own store, whose table is there (%s)", health)
                    .isEqualTo(Status.UP);
              });
    } finally {
      TestDatabase.dropSchema(primary);
      TestDatabase.dropSchema(dedup);
    }
  }
}
