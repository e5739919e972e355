package io.consumerdedup.spring.autoconfigure;

import static org.assertj.core.api.Assertions.assertThat;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.spring.Idempotent;
import io.consumerdedup.spring.IdempotentExecutors;
import io.consumerdedup.spring.InvalidIdempotentListenerException;
import io.consumerdedup.testing.ConnectionSource;
import io.consumerdedup.testing.TestDatabase;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.net.ServerSocket;
import java.sql.Connection;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import javax.sql.DataSource;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration;
import org.springframework.boot.kafka.autoconfigure.KafkaAutoConfiguration;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.jdbc.datasource.DriverManagerDataSource;
import org.springframework.kafka.annotation.KafkaListener;

/**
 * The mistakes a newcomer makes in the first hour stop the application with what to do, instead of
 * failing every record later: a bad property, a forgotten table. And the start-up log says which
 * listeners are protected, and how.
 */
@ExtendWith(OutputCaptureExtension.class)
class FirstHourMistakesTest {
  private final List<String> schemas = new ArrayList<>();

  @AfterEach
  void dropSchemas() {
    schemas.forEach(TestDatabase::dropSchema);
  }

  private String schemaWithTable() {
    String schema = TestDatabase.newSchema("spring_first_hour");
    schemas.add(schema);
    return schema;
  }

  private ApplicationContextRunner runner(String schema) {
    return new ApplicationContextRunner()
        .withConfiguration(
            AutoConfigurations.of(
                DataSourceAutoConfiguration.class, ConsumerDedupAutoConfiguration.class))
        .withPropertyValues(
            "spring.datasource.url=" + TestDatabase.url(schema),
            "spring.datasource.hikari.maximum-pool-size=2");
  }

  @ParameterizedTest(name = "{0}")
  @CsvSource(
      delimiter = '|',
      value = {
        "consumer-dedup.lease=-5s | consumer-dedup.lease=-5s is not allowed: it must be at least 1s",
        "consumer-dedup.lease=500ms | consumer-dedup.lease=500ms is not allowed: it must be at least 1s",
        "consumer-dedup.retention=1m | consumer-dedup.retention=1m is not allowed: it must be at least"
            + " the lease (5m)",
        "consumer-dedup.retention=400000d | consumer-dedup.retention=400000d is not allowed: it must"
            + " be at most 365000d",
        "consumer-dedup.cleanup.interval=-10m | consumer-dedup.cleanup.interval=-10m is not"
            + " allowed: it must be a positive duration",
        "consumer-dedup.cleanup.max-run-time=200000d | consumer-dedup.cleanup.max-run-time=200000d"
            + " is not allowed: it must be at most 36500d",
        "consumer-dedup.cleanup.batch-size=0 | consumer-dedup.cleanup.batch-size=0 is not allowed:"
            + " it must be at least 1",
        "consumer-dedup.store.retry-max-attempts=0 | consumer-dedup.store.retry-max-attempts=0 is"
            + " not allowed: it must be at least 1",
        "consumer-dedup.max-attempts=0 | consumer-dedup.max-attempts=0 is not allowed: it must be"
            + " at least 1",
        "consumer-dedup.hold.max-backoff=100ms | consumer-dedup.hold.max-backoff=100ms is not"
            + " allowed: it must be at least hold.initial-backoff (1s)",
        "consumer-dedup.share.delivery-count-limit=1 | consumer-dedup.share.delivery-count-limit=1"
            + " is not allowed: it must be at least 2",
        "consumer-dedup.share.retry-backoff=-1s | consumer-dedup.share.retry-backoff=-1s is not"
            + " allowed: it must be a positive duration",
        "consumer-dedup.table-name=drop table; | consumer-dedup.table-name=drop table; is not"
            + " allowed: it must be an unquoted SQL identifier"
      })
  void aBadPropertyStopsTheApplicationNamingItsValueAndWhatIsAllowed(
      String property, String message) {
    runner(schemaWithTable())
        .withPropertyValues(property)
        .run(context -> assertThat(context).getFailure().rootCause().hasMessageContaining(message));
  }

  @Test
  void anOwnerIdWithAControlCharacterStopsTheApplicationNamingTheProperty() {
    runner(schemaWithTable())
        .withPropertyValues("consumer-dedup.owner-id=billing\n7")
        .run(
            context ->
                assertThat(context)
                    .getFailure()
                    .rootCause()
                    .hasMessage(
                        "consumer-dedup.owner-id=billing\\n7 is not allowed: it must be 1 to 128"
                            + " characters, not blank, with no control characters"));
  }

  @Test
  void aBareNumberIsSecondsForTheLeaseAndDaysForRetentionsNotMilliseconds() {
    runner(schemaWithTable())
        .withPropertyValues(
            "consumer-dedup.lease=30",
            "consumer-dedup.retention=7",
            "consumer-dedup.failed-retention=30")
        .run(
            context -> {
              assertThat(context).hasNotFailed();
              var executor = context.getBean(IdempotentExecutors.class).defaultExecutor();
              assertThat(executor.lease()).isEqualTo(Duration.ofSeconds(30));
              assertThat(executor.successRetention()).isEqualTo(Duration.ofDays(7));
              assertThat(executor.failedRetention()).isEqualTo(Duration.ofDays(30));
            });
  }

  @Test
  void aForgottenTableStopsTheApplicationWithTheFix() {
    String schema = schemaWithTable();
    // A name no schema of the shared test database has: the error names the schemas that have
    // a table of the name the application looks for.
    String table = "forgotten_" + schema;

    runner(schema)
        .withPropertyValues("consumer-dedup.table-name=" + table)
        .run(
            context ->
                assertThat(context)
                    .getFailure()
                    .rootCause()
                    .hasMessageContaining("The dedup table " + table + " does not exist. Create it")
                    .hasMessageContaining(JdbcDedupStore.SCHEMA_RESOURCE)
                    .hasMessageContaining("psql")
                    .hasMessageContaining("consumer-dedup.initialize-schema=always"));
  }

  /**
   * A JDBC URL no driver accepts ({@code jdbc:postgres:} for {@code jdbc:postgresql:}, or the
   * driver's jar left out) can never give a connection: it stopped nothing, the application
   * started, and every record waited for a database that was not down but never asked, with WARN
   * lines that read like an outage.
   */
  @ParameterizedTest(name = "{0}")
  @CsvSource({
    "HikariCP finding the driver by the URL, hikari",
    "HikariCP with the driver's class named, hikari-driver",
    "Spring's DriverManagerDataSource, driver-manager"
  })
  void aJdbcUrlNoDriverAcceptsStopsTheApplicationInsteadOfWaitingForADatabase(
      String description, String kind) {
    String url =
        TestDatabase.baseUrl().replace("jdbc:postgresql:", "jdbc:postgres:") + "&password=hunter2";
    new ApplicationContextRunner()
        .withConfiguration(AutoConfigurations.of(ConsumerDedupAutoConfiguration.class))
        .withBean(DataSource.class, () -> dataSource(kind, url))
        .run(
            context ->
                assertThat(context)
                    .getFailure()
                    .rootCause()
                    .hasMessageContaining(
                        "No JDBC driver accepts the URL of the dedup table's DataSource")
                    .hasMessageContaining("jdbc:postgres:")
                    .hasMessageContaining("(the rest of it is not shown: it may hold a password)")
                    .hasMessageNotContaining("hunter2")
                    .hasMessageContaining("not an outage"));
  }

  /**
   * With {@code consumer-dedup.initialize-schema=always} the schema's initializer asks the
   * DataSource for a connection before the store does, and it passed the driver's refusal on as it
   * stood: DriverManager's "No suitable driver found for" and PostgreSQL's driver's "Unable to
   * parse URL" (a bare '%' in the password) name the whole URL, password included, in the start-up
   * failure the application prints.
   */
  @ParameterizedTest(name = "{0}")
  @CsvSource({
    "a scheme no driver takes, jdbc:postgres:, hunter2",
    "a bare '%' in the password, jdbc:postgresql:, 50%off"
  })
  void aUrlNoDriverAcceptsIsNamedWithoutItsPasswordWhenTheSchemaIsInitialized(
      String description, String scheme, String password, CapturedOutput output) {
    String url =
        TestDatabase.baseUrl().replace("jdbc:postgresql:", scheme) + "&password=" + password;
    new ApplicationContextRunner()
        .withConfiguration(AutoConfigurations.of(ConsumerDedupAutoConfiguration.class))
        .withPropertyValues("consumer-dedup.initialize-schema=always")
        .withBean(DataSource.class, () -> new DriverManagerDataSource(url))
        .run(
            context -> {
              assertThat(context)
                  .getFailure()
                  .rootCause()
                  .hasMessageContaining(
                      "No JDBC driver accepts the URL of the dedup table's DataSource");
              StringWriter printed = new StringWriter();
              context.getStartupFailure().printStackTrace(new PrintWriter(printed));
              assertThat(printed.toString())
                  .as("the start-up failure as printed, causes included")
                  .doesNotContain(password);
            });

    assertThat(output).as("what was logged").doesNotContain(password);
  }

  @Test
  void aDatabaseThatIsDownAtStartupDoesNotStopTheApplication(CapturedOutput output)
      throws Exception {
    int closedPort;
    try (ServerSocket socket = new ServerSocket(0)) {
      closedPort = socket.getLocalPort();
    }
    String url = "jdbc:postgresql://127.0.0.1:" + closedPort + "/test?user=postgres";
    new ApplicationContextRunner()
        .withConfiguration(AutoConfigurations.of(ConsumerDedupAutoConfiguration.class))
        .withBean(DataSource.class, () -> dataSource("hikari", url))
        .run(context -> assertThat(context).hasNotFailed());

    assertThat(output)
        .contains(
            "Could not check the dedup table consumer_dedup now; records wait until the database"
                + " answers");
  }

  /**
   * The driver's refusal is told by the messages of a failed connection's causes: one whose {@code
   * getMessage()} throws stopped the application, where a database that does not answer only logs.
   */
  @Test
  void aConnectionFailureWhoseMessageCannotBeReadDoesNotStopTheApplication() {
    ConnectionSource unprintable =
        new ConnectionSource() {
          @Override
          public Connection getConnection() {
            throw new IllegalStateException() {
              @Override
              public String getMessage() {
                throw new UnsupportedOperationException("no message");
              }
            };
          }
        };
    new ApplicationContextRunner()
        .withConfiguration(AutoConfigurations.of(ConsumerDedupAutoConfiguration.class))
        .withBean(DataSource.class, () -> unprintable)
        .run(context -> assertThat(context).hasNotFailed());
  }

  private static DataSource dataSource(String kind, String url) {
    if (kind.equals("driver-manager")) {
      return new DriverManagerDataSource(url);
    }
    HikariDataSource hikari = new HikariDataSource();
    if (kind.equals("hikari-driver")) {
      hikari.setDriverClassName("org.postgresql.Driver");
    }
    hikari.setJdbcUrl(url);
    hikari.setMaximumPoolSize(1);
    return hikari;
  }

  @Test
  void aTableInASchemaTheConnectionDoesNotSearchIsNamedInsteadOfCreatingASecondOne() {
    // psql run as another role, or with another search_path, creates the table where the
    // application does not look; a name of this test's own, as the database holds many tables
    // named consumer_dedup.
    String elsewhere = schemaWithTable();
    String table = "dedup_" + elsewhere;
    String application = schemaWithTable();
    try (Connection connection = TestDatabase.connect(application);
        Statement statement = connection.createStatement()) {
      statement.execute("ALTER TABLE " + elsewhere + ".consumer_dedup RENAME TO " + table);
    } catch (Exception e) {
      throw new IllegalStateException(e);
    }

    runner(application)
        .withPropertyValues("consumer-dedup.table-name=" + table)
        .run(
            context ->
                assertThat(context)
                    .getFailure()
                    .rootCause()
                    .hasMessageContaining(
                        "The dedup table "
                            + table
                            + " does not exist where the connection looks for it, but schema "
                            + elsewhere
                            + " has a table "
                            + table)
                    .hasMessageContaining(
                        "If that is this application's dedup table, name it with its schema:"
                            + " consumer-dedup.table-name="
                            + elsewhere
                            + "."
                            + table));
    runner(application)
        .withPropertyValues("consumer-dedup.table-name=" + elsewhere + "." + table)
        .run(context -> assertThat(context).hasNotFailed());
  }

  @Test
  void aBizTypeLongerThanItsColumnStopsTheApplicationNamingTheLimit() {
    runner(schemaWithTable())
        .withBean(LongBizType.class)
        .run(
            context -> {
              Throwable cause = context.getStartupFailure();
              while (cause != null && !(cause instanceof InvalidIdempotentListenerException)) {
                cause = cause.getCause();
              }
              assertThat(cause)
                  .isInstanceOfSatisfying(
                      InvalidIdempotentListenerException.class,
                      refused -> {
                        assertThat(refused.listener()).endsWith("LongBizType#charge");
                        assertThat(refused.problem())
                            .startsWith("bizType is longer than 64 characters (66)");
                        assertThat(refused.action())
                            .startsWith("Shorten it to at most 64 characters");
                      });
            });
  }

  @Test
  void aTableFromAnOlderSchemaStopsTheApplicationNamingTheMissingColumn() {
    String schema = schemaWithTable();
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement()) {
      statement.execute("ALTER TABLE consumer_dedup DROP COLUMN claim_id");
    } catch (Exception e) {
      throw new IllegalStateException(e);
    }

    runner(schema)
        .run(
            context ->
                assertThat(context)
                    .getFailure()
                    .rootCause()
                    .hasMessageContaining("lacks the column(s) claim_id")
                    .hasMessageContaining("ALTER TABLE consumer_dedup ADD COLUMN claim_id"));
  }

  @Test
  void theStartupLogNamesEachIdempotentListenerAndHowItIsProtected(CapturedOutput output) {
    runner(schemaWithTable())
        .withConfiguration(AutoConfigurations.of(KafkaAutoConfiguration.class))
        .withPropertyValues("spring.kafka.listener.auto-startup=false")
        .withBean(Payments.class)
        .run(context -> assertThat(context).hasNotFailed());

    assertThat(output)
        .contains(
            "Idempotent listener "
                + Payments.class.getName()
                + "#charge (id payments): biz type 'payment', key from header 'order-no', mode"
                + " SEPARATE, lease 5m, table consumer_dedup");
  }

  @Test
  void aListenersBareNumberLeaseIsSecondsAsTheLeasePropertysIs(CapturedOutput output) {
    runner(schemaWithTable())
        .withConfiguration(AutoConfigurations.of(KafkaAutoConfiguration.class))
        .withPropertyValues("spring.kafka.listener.auto-startup=false")
        .withBean(BareNumberLease.class)
        .run(context -> assertThat(context).hasNotFailed());

    // consumer-dedup.lease=30 is 30 seconds; the same 30 in @Idempotent was 30 milliseconds, a
    // lease that a GC pause outlasts, so another consumer took the key over mid-run.
    assertThat(output)
        .contains("#charge (id bare-lease): biz type 'payment'")
        .contains("lease 30s");
  }

  @Test
  void aListenersLeaseUnderASecondStopsTheApplicationAsTheLeasePropertyDoes() {
    runner(schemaWithTable())
        .withConfiguration(AutoConfigurations.of(KafkaAutoConfiguration.class))
        .withPropertyValues("spring.kafka.listener.auto-startup=false")
        .withBean(ShortLease.class)
        .run(
            context ->
                assertThat(context)
                    .getFailure()
                    .rootCause()
                    .hasMessageContaining("lease must be at least 1s, was 500ms"));
  }

  @Test
  void theStartupLogNamesTheTableOfAStoreOfTheApplicationsOwn(CapturedOutput output)
      throws Exception {
    String schema = schemaWithTable();
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement()) {
      statement.execute("CREATE TABLE own_dedup (LIKE consumer_dedup INCLUDING ALL)");
    }
    runner(schema)
        .withConfiguration(AutoConfigurations.of(KafkaAutoConfiguration.class))
        .withPropertyValues("spring.kafka.listener.auto-startup=false")
        .withUserConfiguration(OwnStore.class)
        .withBean(Payments.class)
        .run(context -> assertThat(context).hasNotFailed());

    assertThat(output)
        .contains("#charge (id payments): biz type 'payment'")
        .contains("lease 5m, table own_dedup");
  }

  @Configuration(proxyBeanMethods = false)
  static class OwnStore {
    @Bean
    JdbcDedupStore ownStore(DataSource dataSource) {
      return JdbcDedupStore.builder(dataSource).tableName("own_dedup").build();
    }
  }

  static class BareNumberLease {
    @Idempotent(bizType = "payment", header = "order-no", lease = "30")
    @KafkaListener(id = "bare-lease", topics = "payments")
    public void charge(ConsumerRecord<String, String> record) {}
  }

  static class ShortLease {
    @Idempotent(bizType = "payment", header = "order-no", lease = "500ms")
    @KafkaListener(id = "short-lease", topics = "payments")
    public void charge(ConsumerRecord<String, String> record) {}
  }

  static class Payments {
    @Idempotent(bizType = "payment", header = "order-no")
    @KafkaListener(id = "payments", topics = "payments")
    public void charge(ConsumerRecord<String, String> record) {}
  }

  static class LongBizType {
    @Idempotent(
        bizType = "payment-of-an-order-placed-through-the-partner-marketplace-channel",
        header = "order-no")
    @KafkaListener(topics = "t")
    public void charge(ConsumerRecord<String, String> record) {}
  }
}
