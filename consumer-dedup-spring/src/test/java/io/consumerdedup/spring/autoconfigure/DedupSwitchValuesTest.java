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
 * false}, read as Boot's binder reads a boolean (on/off, yes/no, 1/0; blank is unset). Boot's
 * property conditions compare the text with "true", so {@code consumer-dedup.enabled=on} turned
 * every consumer-dedup auto-configuration off (with them the checks that refuse a bad setup) and
 * {@code @Idempotent} listeners ran unprotected without a word; {@code cleanup.enabled=on} bound
 * true but made no janitor; a trailing space made {@code initialize-schema=always} create no table.
 * (The values are set as a property source, as a properties file keeps them: the runner's own
 * property values are trimmed.)
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
  @ValueSource(strings = {"ture", "enabled", "2"})
  void anEnabledThatIsNotABooleanStopsTheApplicationInsteadOfTurningDedupOff(String value) {
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
                            + "' is not allowed: it must be true or false (or on/off, yes/no,"
                            + " 1/0)"));
  }

  @ParameterizedTest
  @ValueSource(strings = {"true ", " TRUE", "on", "Yes", "1"})
  void anEnabledThatBindsTrueTurnsDedupOn(String value) {
    runner("consumer-dedup.enabled", value)
        .run(context -> assertThat(context).hasNotFailed().hasSingleBean(DedupStore.class));
  }

  /**
   * A blank value ({@code ${X:}}) is not taken as false (it turned dedup off before): Boot's binder
   * reads it as no value, which its boolean property cannot hold, and start-up stops naming it.
   */
  @ParameterizedTest
  @ValueSource(strings = {"", "  "})
  void aBlankEnabledStopsTheApplicationNamingItInsteadOfTurningDedupOff(String value) {
    runner("consumer-dedup.enabled", value)
        .run(
            context ->
                assertThat(context)
                    .getFailure()
                    .hasStackTraceContaining(
                        "Failed to bind properties under 'consumer-dedup.enabled'"));
  }

  /** As Boot's binder reads them: these turned dedup off before, and must go on doing so. */
  @ParameterizedTest
  @ValueSource(strings = {"false", " FALSE ", "off", "no", "0"})
  void anEnabledThatBindsFalseTurnsDedupOff(String value) {
    runner("consumer-dedup.enabled", value)
        .run(context -> assertThat(context).hasNotFailed().doesNotHaveBean(DedupStore.class));
  }

  @ParameterizedTest
  @ValueSource(strings = {"ture", "enabled"})
  void aCleanupEnabledThatIsNotABooleanStopsTheApplicationInsteadOfMakingNoJanitor(String value) {
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
  @ValueSource(strings = {"true ", "True", "on", "yes"})
  void aCleanupEnabledThatBindsTrueMakesTheJanitor(String value) {
    runner("consumer-dedup.cleanup.enabled", value)
        .run(context -> assertThat(context).hasNotFailed().hasSingleBean(DedupJanitor.class));
  }

  @ParameterizedTest
  @ValueSource(strings = {"off", "0"})
  void aCleanupEnabledThatBindsFalseMakesNoJanitor(String value) {
    runner("consumer-dedup.cleanup.enabled", value)
        .run(context -> assertThat(context).hasNotFailed().doesNotHaveBean(DedupJanitor.class));
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
