package io.consumerdedup.spring.autoconfigure;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.DedupStore;
import io.consumerdedup.jdbc.DedupJanitor;
import io.consumerdedup.testing.TestDatabase;
import java.util.Map;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.core.env.MapPropertySource;

/**
 * consumer-dedup's on/off properties given as something other than exactly {@code true} or {@code
 * false}. Boot's property conditions compare the text with "true", so {@code
 * consumer-dedup.enabled=on} turned every consumer-dedup auto-configuration off (with them the
 * checks that refuse a bad setup) and {@code @Idempotent} listeners ran unprotected without a word;
 * {@code cleanup.enabled=on} bound true but made no janitor; a trailing space made {@code
 * initialize-schema=always} create no table. (The values are set as a property source, as a
 * properties file keeps them: the runner's own property values are trimmed.)
 */
class DedupSwitchValuesTest {
  private String schema;

  @BeforeEach
  void schema() {
    schema = TestDatabase.newSchema("switch_values");
  }

  @AfterEach
  void dropSchema() {
    TestDatabase.dropSchema(schema);
  }

  private ApplicationContextRunner runner(String property, String value) {
    return new ApplicationContextRunner()
        .withConfiguration(
            AutoConfigurations.of(
                DataSourceAutoConfiguration.class,
                ConsumerDedupAutoConfiguration.class,
                IdempotentListenersWithoutDataSourceAutoConfiguration.class))
        .withPropertyValues(
            "spring.datasource.url=" + TestDatabase.url(schema),
            "spring.datasource.hikari.maximum-pool-size=2")
        .withInitializer(
            context ->
                context
                    .getEnvironment()
                    .getPropertySources()
                    .addFirst(new MapPropertySource("file", Map.of(property, value))));
  }

  @ParameterizedTest
  @ValueSource(strings = {"on", "yes", "1", "ture"})
  void anEnabledThatIsNeitherTrueNorFalseStopsTheApplicationInsteadOfTurningDedupOff(String value) {
    runner("consumer-dedup.enabled", value)
        .run(
            context ->
                assertThat(context)
                    .getFailure()
                    .rootCause()
                    .isInstanceOf(InvalidDedupPropertyException.class)
                    .hasMessage(
                        "consumer-dedup.enabled='"
                            + value
                            + "' is not allowed: it must be true or false"));
  }

  @ParameterizedTest
  @ValueSource(strings = {"true ", " TRUE"})
  void anEnabledOfTrueWithSpacesOrCapitalsTurnsDedupOn(String value) {
    runner("consumer-dedup.enabled", value)
        .run(context -> assertThat(context).hasNotFailed().hasSingleBean(DedupStore.class));
  }

  @ParameterizedTest
  @ValueSource(strings = {"on", "yes"})
  void aCleanupEnabledThatIsNeitherTrueNorFalseStopsTheApplicationInsteadOfMakingNoJanitor(
      String value) {
    runner("consumer-dedup.cleanup.enabled", value)
        .run(
            context ->
                assertThat(context)
                    .getFailure()
                    .rootCause()
                    .isInstanceOf(InvalidDedupPropertyException.class)
                    .hasMessageContaining("consumer-dedup.cleanup.enabled='" + value + "'"));
  }

  @ParameterizedTest
  @ValueSource(strings = {"true ", "True"})
  void aCleanupEnabledOfTrueWithSpacesOrCapitalsMakesTheJanitor(String value) {
    runner("consumer-dedup.cleanup.enabled", value)
        .run(context -> assertThat(context).hasNotFailed().hasSingleBean(DedupJanitor.class));
  }

  @ParameterizedTest
  @ValueSource(strings = {"always ", "ALWAYS"})
  void anInitializeSchemaOfAlwaysWithSpacesOrCapitalsCreatesTheTable(String value) {
    runner("consumer-dedup.initialize-schema", value)
        .run(
            context ->
                assertThat(context).hasNotFailed().hasSingleBean(DedupSchemaInitializer.class));
  }
}
