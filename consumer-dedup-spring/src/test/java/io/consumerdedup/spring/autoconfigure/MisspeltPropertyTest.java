package io.consumerdedup.spring.autoconfigure;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.spring.IdempotentExecutors;
import io.consumerdedup.testing.TestDatabase;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;

/**
 * A {@code consumer-dedup.*} property whose name is spelt otherwise than consumer-dedup's: Spring
 * Boot ignores it, and the default stayed in force without a word. A misspelt mode left mode
 * SEPARATE, and its crash window, to an application that meant TRANSACTIONAL.
 */
class MisspeltPropertyTest {
  private String schema;

  @BeforeEach
  void schema() {
    schema = TestDatabase.newSchema("misspelt_property");
  }

  @AfterEach
  void dropSchema() {
    TestDatabase.dropSchema(schema);
  }

  private ApplicationContextRunner runner() {
    return new ApplicationContextRunner()
        .withConfiguration(
            AutoConfigurations.of(
                DataSourceAutoConfiguration.class, ConsumerDedupAutoConfiguration.class))
        .withPropertyValues(
            "spring.datasource.url=" + TestDatabase.url(schema),
            "spring.datasource.hikari.maximum-pool-size=2");
  }

  @Test
  void aMisspeltModeStopsTheApplicationNamingThePropertyMeantInsteadOfRunningInModeSeparate() {
    runner()
        .withPropertyValues("consumer-dedup.dedup-mode=TRANSACTIONAL")
        .run(
            context ->
                assertThat(context)
                    .getFailure()
                    .rootCause()
                    .isInstanceOf(DedupConfigurationException.class)
                    .hasMessageContaining("consumer-dedup.dedup-mode=TRANSACTIONAL")
                    .hasMessageContaining(
                        "is not a consumer-dedup property: Spring Boot would ignore it and leave"
                            + " the default in force. Did you mean consumer-dedup.mode?"));
  }

  @Test
  void aMisspeltNestedPropertyStopsTheApplicationNamingThePropertyMeant() {
    runner()
        .withPropertyValues("consumer-dedup.cleanup.enable=false")
        .run(
            context ->
                assertThat(context)
                    .getFailure()
                    .rootCause()
                    .hasMessageContaining("consumer-dedup.cleanup.enable=false")
                    .hasMessageContaining("Did you mean consumer-dedup.cleanup.enabled?"));
  }

  @Test
  void everyPropertyAsDocumentedInAnyRelaxedFormStarts() {
    runner()
        .withPropertyValues(
            "consumer-dedup.mode=TRANSACTIONAL",
            "consumer-dedup.tableName=consumer_dedup",
            "consumer-dedup.max_attempts=4",
            "consumer-dedup.shared-biz-types[0]=audit",
            "consumer-dedup.store.retry-max-attempts=3",
            "consumer-dedup.hold.initial-backoff=2s",
            "consumer-dedup.share.retry-backoff=2s",
            "consumer-dedup.cleanup.enabled=false",
            "consumer-dedup.admin.write-enabled=false",
            "consumer-dedup.claims-per-poll=true")
        .run(
            context -> {
              assertThat(context).hasNotFailed();
              assertThat(context.getBean(IdempotentExecutors.class).defaultExecutor().mode())
                  .isEqualTo(DedupMode.TRANSACTIONAL);
            });
  }
}
