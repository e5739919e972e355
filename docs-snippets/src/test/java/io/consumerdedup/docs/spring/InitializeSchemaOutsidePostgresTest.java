package io.consumerdedup.docs.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.consumerdedup.docs.DocsDatabase;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.jdbc.SqlDialect;
import io.consumerdedup.spring.autoconfigure.ConsumerDedupAutoConfiguration;
import io.consumerdedup.test.InMemoryDedupStore;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.sql.Statement;
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
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;

/**
 * {@code consumer-dedup.initialize-schema=always} is for PostgreSQL only: on another database it
 * stops the application at start-up saying so, as Spring Boot's failure report, as every start-up
 * refusal of consumer-dedup is. On MariaDB (docs/mysql.md), and on H2 in the tests docs/testing.md
 * describes, where the README's quick start put the property in the application's own file.
 */
@ExtendWith(OutputCaptureExtension.class)
class InitializeSchemaOutsidePostgresTest {

  private static String url() {
    String url = System.getenv("DEDUP_TEST_MARIADB_URL");
    return url == null || url.isBlank() ? "jdbc:mariadb://127.0.0.1:3306/test?user=root" : url;
  }

  @Test
  void initializeSchemaAlwaysStopsTheApplicationSayingWhatToDoInstead(CapturedOutput output) {
    try (Connection ignored = DriverManager.getConnection(url())) {
      // reachable
    } catch (SQLException e) {
      assumeTrue(false, "No MariaDB at " + url() + ": " + e.getMessage());
    }

    assertThatThrownBy(
            () ->
                new SpringApplicationBuilder(App.class)
                    .web(WebApplicationType.NONE)
                    .run(
                        "--spring.datasource.url=" + url(),
                        "--consumer-dedup.initialize-schema=always"))
        .isNotNull();

    assertThat(output.getOut())
        .contains(
            FailureReport.describing(
                "consumer-dedup.initialize-schema=always supports PostgreSQL only; on MySQL or"
                    + " MariaDB create the table consumer_dedup from"
                    + " db/consumer-dedup/mysql/V1__consumer_dedup.sql with your migrations"))
        .as("no stack trace")
        .doesNotContain("\tat org.springframework.beans");
  }

  /**
   * docs/testing.md's way out for tests on H2, an InMemoryDedupStore bean, in an application whose
   * properties create the table at start-up.
   */
  @Test
  void onH2ItSaysSoInsteadOfFailingOnPostgreSqlsDdl(CapturedOutput output) {
    assertThatThrownBy(
            () ->
                new SpringApplicationBuilder(App.class, InMemoryStore.class)
                    .web(WebApplicationType.NONE)
                    .run(
                        "--spring.datasource.url=jdbc:h2:mem:initialize;DB_CLOSE_DELAY=-1",
                        "--consumer-dedup.initialize-schema=always"))
        .isNotNull();

    assertThat(output.getOut())
        .contains(
            FailureReport.describing(
                "consumer-dedup.initialize-schema=always supports PostgreSQL only; the DataSource"
                    + " is H2"))
        .contains("consumer-dedup.initialize-schema=never")
        .as("no stack trace")
        .doesNotContain("\tat org.springframework.beans");
  }

  /**
   * configuration.md: a store of the application's own with its dialect set, for a DataSource that
   * hides the database's name (a proxy): the table is created there as on PostgreSQL.
   */
  @Test
  void theDialectOfTheApplicationsOwnStoreDecidesBehindAProxyThatHidesTheDatabase()
      throws Exception {
    try (DocsDatabase database = DocsDatabase.create("docs_initialize_hidden")) {
      try (Connection connection = database.getConnection();
          Statement statement = connection.createStatement()) {
        statement.execute("DROP TABLE consumer_dedup");
      }
      DataSource hidden = hidingTheProduct(database);

      new ApplicationContextRunner()
          .withConfiguration(AutoConfigurations.of(ConsumerDedupAutoConfiguration.class))
          .withBean(DataSource.class, () -> hidden)
          .withBean(
              JdbcDedupStore.class,
              () -> JdbcDedupStore.builder(hidden).dialect(SqlDialect.POSTGRESQL).build())
          .withPropertyValues("consumer-dedup.initialize-schema=always")
          .run(context -> assertThat(context).hasNotFailed());

      try (Connection connection = database.getConnection();
          Statement statement = connection.createStatement()) {
        assertThat(statement.executeQuery("SELECT count(*) FROM consumer_dedup").next())
            .as("the table created")
            .isTrue();
      }
    }
  }

  /** A DataSource whose connections name their database "Hidden", as some proxies do. */
  private static DataSource hidingTheProduct(DataSource target) {
    return proxy(
        DataSource.class,
        target,
        (method, result) ->
            method.getName().equals("getConnection")
                ? proxy(
                    Connection.class,
                    result,
                    (inner, metadata) ->
                        inner.getName().equals("getMetaData")
                            ? proxy(
                                DatabaseMetaData.class,
                                metadata,
                                (call, value) ->
                                    call.getName().equals("getDatabaseProductName")
                                        ? "Hidden"
                                        : value)
                            : metadata)
                : result);
  }

  private static <T> T proxy(
      Class<T> type, Object target, java.util.function.BiFunction<Method, Object, Object> after) {
    return type.cast(
        Proxy.newProxyInstance(
            type.getClassLoader(),
            new Class<?>[] {type},
            (self, method, args) -> {
              try {
                return after.apply(method, method.invoke(target, args));
              } catch (InvocationTargetException e) {
                throw e.getCause();
              }
            }));
  }

  @Configuration(proxyBeanMethods = false)
  static class InMemoryStore {
    @Bean
    InMemoryDedupStore dedupStore() {
      return new InMemoryDedupStore();
    }
  }

  @Configuration(proxyBeanMethods = false)
  @ImportAutoConfiguration({
    DataSourceAutoConfiguration.class,
    ConsumerDedupAutoConfiguration.class
  })
  static class App {}
}
