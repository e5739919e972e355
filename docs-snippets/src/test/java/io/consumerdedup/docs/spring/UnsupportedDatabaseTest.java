package io.consumerdedup.docs.spring;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.spring.autoconfigure.ConsumerDedupAutoConfiguration;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.jdbc.datasource.SimpleDriverDataSource;

/**
 * docs/testing.md: an application whose DataSource is a database the JDBC store does not support
 * (H2, as many applications' tests have) does not start, and says why and what to do. Before, it
 * started with one WARN line and then held every record of its {@code @Idempotent} listeners for
 * good, so a test timed out with nothing pointing at the database.
 */
class UnsupportedDatabaseTest {

  @Test
  void anApplicationOnH2DoesNotStartAndSaysWhatToDo() {
    DataSource h2 =
        new SimpleDriverDataSource(new org.h2.Driver(), "jdbc:h2:mem:orders;DB_CLOSE_DELAY=-1");

    new ApplicationContextRunner()
        .withConfiguration(AutoConfigurations.of(ConsumerDedupAutoConfiguration.class))
        .withBean(DataSource.class, () -> h2)
        .run(
            context ->
                assertThat(context)
                    .getFailure()
                    .rootCause()
                    .isInstanceOf(DedupConfigurationException.class)
                    .hasMessageContaining("the DataSource is H2")
                    .hasMessageContaining("InMemoryDedupStore")
                    .hasMessageContaining("consumer-dedup.enabled=false"));
  }
}
