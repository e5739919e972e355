package io.consumerdedup.docs.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.spring.autoconfigure.ConsumerDedupAutoConfiguration;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.autoconfigure.ImportAutoConfiguration;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.context.annotation.Configuration;
import org.springframework.jdbc.datasource.SimpleDriverDataSource;

/**
 * docs/testing.md: an application whose DataSource is a database the JDBC store does not support
 * (H2, as many applications' tests have) does not start, and says why and what to do. Before, it
 * started with one WARN line and then held every record of its {@code @Idempotent} listeners for
 * good, so a test timed out with nothing pointing at the database.
 */
@ExtendWith(OutputCaptureExtension.class)
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

  /**
   * docs/spring-boot.md: Spring Boot shows every start-up refusal of consumer-dedup as its failure
   * report, this one too: the sentence on its own, not at the end of a stack trace.
   */
  @Test
  void theRefusalIsSpringBootsFailureReport(CapturedOutput output) {
    assertThatThrownBy(
            () ->
                new SpringApplicationBuilder(App.class)
                    .web(WebApplicationType.NONE)
                    .run("--spring.datasource.url=jdbc:h2:mem:report;DB_CLOSE_DELAY=-1"))
        .isNotNull();

    assertThat(output.getOut())
        .contains(
            FailureReport.describing(
                "JdbcDedupStore supports PostgreSQL, MySQL and MariaDB; the DataSource is H2"))
        .as("no stack trace")
        .doesNotContain("\tat org.springframework.beans");
  }

  @Configuration(proxyBeanMethods = false)
  @ImportAutoConfiguration({
    DataSourceAutoConfiguration.class,
    ConsumerDedupAutoConfiguration.class
  })
  static class App {}
}
