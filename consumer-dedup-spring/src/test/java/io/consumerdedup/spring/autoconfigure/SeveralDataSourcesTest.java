package io.consumerdedup.spring.autoconfigure;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.spring.IdempotentExecutors;
import io.consumerdedup.testing.TestDatabase;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.Statement;
import javax.sql.DataSource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.assertj.AssertableApplicationContext;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;

/**
 * An application with two DataSources, the orders database and another that holds the dedup table,
 * neither of them {@code @Primary}: Spring Boot's own JDBC beans back off, and consumer-dedup's
 * stopped the application with {@code expected single matching bean but found 2}, with no way to
 * say which DataSource holds the table short of making it the whole application's primary one.
 */
class SeveralDataSourcesTest {
  private String orders;
  private String dedup;

  @BeforeEach
  void schemas() throws Exception {
    orders = TestDatabase.newSchema("several_orders");
    dedup = TestDatabase.newSchema("several_dedup");
    // The orders database has no dedup table: a store on it stops the application.
    try (Connection connection = TestDatabase.connect(orders);
        Statement statement = connection.createStatement()) {
      statement.execute("DROP TABLE consumer_dedup");
    }
  }

  @AfterEach
  void dropSchemas() {
    TestDatabase.dropSchema(orders);
    TestDatabase.dropSchema(dedup);
  }

  private ApplicationContextRunner runner(boolean ordersPrimary) {
    return new ApplicationContextRunner()
        .withConfiguration(AutoConfigurations.of(ConsumerDedupAutoConfiguration.class))
        .withBean(
            "ordersDataSource",
            DataSource.class,
            () -> TestDatabase.dataSource(orders, 2),
            definition -> definition.setPrimary(ordersPrimary))
        .withBean("dedupDataSource", DataSource.class, () -> TestDatabase.dataSource(dedup, 2));
  }

  @Test
  void consumerDedupDataSourceNamesTheDataSourceThatHoldsTheTable() {
    runner(false)
        .withPropertyValues("consumer-dedup.data-source=dedupDataSource")
        .run(this::assertClaimsLandOnTheDedupDataSource);
  }

  @Test
  void consumerDedupDataSourceOutranksThePrimaryDataSource() {
    runner(true)
        .withPropertyValues("consumer-dedup.data-source=dedupDataSource")
        .run(this::assertClaimsLandOnTheDedupDataSource);
  }

  @Test
  void severalDataSourcesAndNoneChosenStopTheApplicationNamingThemAndTheProperty() {
    runner(false)
        .run(
            context ->
                assertThat(context)
                    .getFailure()
                    .rootCause()
                    .hasMessageContaining(
                        "consumer-dedup needs the DataSource that holds its table, and the"
                            + " application has 2 (dedupDataSource, ordersDataSource), no single"
                            + " one of them @Primary")
                    .hasMessageContaining("consumer-dedup.data-source"));
  }

  @Test
  void aDataSourceNameNoBeanHasStopsTheApplicationNamingTheDataSources() {
    runner(false)
        .withPropertyValues("consumer-dedup.data-source=dedupDatasource")
        .run(
            context ->
                assertThat(context)
                    .getFailure()
                    .rootCause()
                    .hasMessageContaining(
                        "consumer-dedup.data-source=dedupDatasource names no DataSource bean; the"
                            + " application's are dedupDataSource, ordersDataSource"));
  }

  /** Claims a key through the application's executors and finds its row on the dedup DataSource. */
  private void assertClaimsLandOnTheDedupDataSource(AssertableApplicationContext context)
      throws Exception {
    assertThat(context).hasNotFailed();
    context
        .getBean(IdempotentExecutors.class)
        .defaultExecutor()
        .execute(DedupKey.of("payment", "order-1"), () -> "charged");
    assertThat(rows(dedup)).isEqualTo(1);
  }

  private static int rows(String schema) throws Exception {
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement();
        ResultSet count = statement.executeQuery("SELECT count(*) FROM consumer_dedup")) {
      count.next();
      return count.getInt(1);
    }
  }
}
