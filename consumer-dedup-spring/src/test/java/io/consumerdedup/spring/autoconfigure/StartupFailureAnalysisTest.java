package io.consumerdedup.spring.autoconfigure;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.consumerdedup.spring.Idempotent;
import io.consumerdedup.testing.TestDatabase;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.ImportAutoConfiguration;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.kafka.annotation.KafkaListener;

/**
 * consumer-dedup's start-up errors reach the user as Spring Boot's "APPLICATION FAILED TO START"
 * report, with the library's sentence as the description and what to do as the action, not as a
 * stack trace: a real {@code SpringApplication} that fails, its console output captured.
 */
@ExtendWith(OutputCaptureExtension.class)
class StartupFailureAnalysisTest {
  private final List<String> schemas = new ArrayList<>();

  @AfterEach
  void dropSchemas() {
    schemas.forEach(TestDatabase::dropSchema);
  }

  private String schema() {
    String schema = TestDatabase.newSchema("spring_failure_analysis");
    schemas.add(schema);
    return schema;
  }

  private static void startFails(String schema, Class<?>... sources) {
    SpringApplicationBuilder application =
        new SpringApplicationBuilder(sources).web(WebApplicationType.NONE);
    assertThatThrownBy(() -> application.run("--spring.datasource.url=" + TestDatabase.url(schema)))
        .isNotNull();
  }

  private static String report(String description, String action) {
    String n = System.lineSeparator();
    return "APPLICATION FAILED TO START"
        + n
        + "***************************"
        + n
        + n
        + "Description:"
        + n
        + n
        + description
        + n
        + n
        + "Action:"
        + n
        + n
        + action
        + n;
  }

  @Test
  void aPropertyThatIsNotAllowedIsDescribedWithWhereItIsSetAndWhatToSetInstead(
      CapturedOutput output) {
    String schema = schema();
    assertThatThrownBy(
            () ->
                new SpringApplicationBuilder(App.class)
                    .web(WebApplicationType.NONE)
                    .run(
                        "--spring.datasource.url=" + TestDatabase.url(schema),
                        "--spring.config.location=classpath:failure-analysis/bad-lease.properties"))
        .isNotNull();

    assertThat(output.getOut())
        .contains(
            report(
                "consumer-dedup.lease=-5s is not allowed: it must be at least 1s (set in class path"
                    + " resource [failure-analysis/bad-lease.properties] - 3:22)",
                "Set consumer-dedup.lease to at least 1s, or remove it to use the default."))
        .as("no stack trace")
        .doesNotContain("\tat org.springframework.beans");
  }

  @Test
  void aKeyExpressionThatCannotGiveAKeyIsDescribedWithWhatToWriteInstead(CapturedOutput output) {
    startFails(schema(), App.class, HeaderNameInKey.class);

    assertThat(output.getOut())
        .contains(
            report(
                "@Idempotent on "
                    + HeaderNameInKey.Orders.class.getName()
                    + "#place (bean 'orders'): key expression 'order-no' reads order as a property"
                    + " of the evaluation root, but the expression has no root object: it reads the"
                    + " record through #payload, #headers, #record and #topic ('order-no' is parsed"
                    + " as an expression, not as a name).",
                "To take the key from the header 'order-no', write header = \"order-no\" instead"
                    + " (or key = \"#headers['order-no']\")."))
        .as("no stack trace")
        .doesNotContain("\tat org.springframework.beans");
  }

  @Test
  void aListenerShapeThatCannotBeProtectedIsDescribedWithTheRemedy(CapturedOutput output) {
    startFails(schema(), App.class, FinalListener.class);

    assertThat(output.getOut())
        .contains(
            report(
                "@Idempotent on "
                    + FinalListener.Orders.class.getName()
                    + "#place (bean 'orders'): the method is final, so the proxy cannot intercept"
                    + " it and nothing would be deduplicated.",
                "Make it a non-final, non-private instance method (public, protected or package-private)."));
  }

  @Test
  void listenersOfTwoGroupsSharingABizTypeAreDescribedWithTheRemedy(CapturedOutput output) {
    startFails(schema(), App.class, TwoGroupsOneBizType.class);

    assertThat(output.getOut())
        .contains(
            report(
                "@Idempotent listeners "
                    + TwoGroupsOneBizType.Billing.class.getName()
                    + "#charge (group billing) and "
                    + TwoGroupsOneBizType.Ledger.class.getName()
                    + "#record (group ledger) share biz type 'payment': each group would skip the"
                    + " keys the other applied as duplicates, and its own action would never run"
                    + " for them.",
                "Give each kind of action its own biz type. If both groups perform the same action"
                    + " and it must run once across them, list the biz type in"
                    + " consumer-dedup.shared-biz-types."));
  }

  @Test
  void aMissingTableIsDescribedWithHowToCreateIt(CapturedOutput output) throws Exception {
    String schema = schema();
    // A name no schema of the shared test database has: the error names the schemas that have
    // a table of the name the application looks for.
    String table = "missing_" + schema;

    SpringApplicationBuilder application =
        new SpringApplicationBuilder(App.class).web(WebApplicationType.NONE);
    assertThatThrownBy(
            () ->
                application.run(
                    "--spring.datasource.url=" + TestDatabase.url(schema),
                    "--consumer-dedup.table-name=" + table))
        .isNotNull();

    assertThat(output.getOut())
        .contains(
            report(
                "The dedup table " + table + " does not exist.",
                "Create it from the schema file db/consumer-dedup/postgresql/V1__consumer_dedup.sql"
                    + " (in the consumer-dedup-schema jar, Flyway naming: copy it into your"
                    + " migrations), for example: unzip -p consumer-dedup-schema-<version>.jar"
                    + " db/consumer-dedup/postgresql/V1__consumer_dedup.sql | psql"
                    + " \"$DATABASE_URL\"; with Spring Boot, consumer-dedup.initialize-schema=always"
                    + " creates it at start-up."));
  }

  @Configuration(proxyBeanMethods = false)
  @ImportAutoConfiguration({
    DataSourceAutoConfiguration.class,
    ConsumerDedupAutoConfiguration.class
  })
  static class App {}

  @Configuration(proxyBeanMethods = false)
  static class HeaderNameInKey {
    @Bean
    Orders orders() {
      return new Orders();
    }

    static class Orders {
      @Idempotent(bizType = "order", key = "order-no")
      @KafkaListener(topics = "orders")
      public void place(String order) {}
    }
  }

  @Configuration(proxyBeanMethods = false)
  static class TwoGroupsOneBizType {
    @Bean
    Billing billing() {
      return new Billing();
    }

    @Bean
    Ledger ledger() {
      return new Ledger();
    }

    static class Billing {
      @Idempotent(bizType = "payment", header = "order-no")
      @KafkaListener(topics = "payments", groupId = "billing")
      public void charge(String payment) {}
    }

    static class Ledger {
      @Idempotent(bizType = "payment", header = "order-no")
      @KafkaListener(topics = "payments", groupId = "ledger")
      public void record(String payment) {}
    }
  }

  @Configuration(proxyBeanMethods = false)
  static class FinalListener {
    @Bean
    Orders orders() {
      return new Orders();
    }

    static class Orders {
      @Idempotent(bizType = "order", header = "order-no")
      @KafkaListener(topics = "orders")
      public final void place(String order) {}
    }
  }
}
