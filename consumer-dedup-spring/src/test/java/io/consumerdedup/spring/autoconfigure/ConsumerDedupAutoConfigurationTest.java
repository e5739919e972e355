package io.consumerdedup.spring.autoconfigure;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.jayway.jsonpath.JsonPath;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupKeyMissingException;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.jdbc.DedupJanitor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.kafka.MissingKeyPolicy;
import io.consumerdedup.micrometer.MicrometerDedupListener;
import io.consumerdedup.spring.Idempotent;
import io.consumerdedup.spring.IdempotentExecutors;
import io.consumerdedup.spring.IdempotentListenerInterceptor;
import io.consumerdedup.spring.RetryLaterAfterRollbackProcessor;
import io.consumerdedup.spring.RetryLaterErrorHandler;
import io.consumerdedup.spring.internal.CurrentRecordInterceptor;
import io.consumerdedup.testing.TestDatabase;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.UUID;
import javax.sql.DataSource;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.context.properties.bind.Binder;
import org.springframework.boot.context.properties.source.MapConfigurationPropertySource;
import org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration;
import org.springframework.boot.kafka.autoconfigure.KafkaAutoConfiguration;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.jdbc.datasource.TransactionAwareDataSourceProxy;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.listener.AbstractMessageListenerContainer;
import org.springframework.kafka.listener.CommonErrorHandler;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.transaction.support.TransactionTemplate;

class ConsumerDedupAutoConfigurationTest {
  private final List<String> schemas = new ArrayList<>();

  private ApplicationContextRunner runner(String schema) {
    return new ApplicationContextRunner()
        .withConfiguration(
            AutoConfigurations.of(
                DataSourceAutoConfiguration.class, ConsumerDedupAutoConfiguration.class))
        .withPropertyValues(
            "spring.datasource.url=" + TestDatabase.url(schema),
            "spring.datasource.hikari.maximum-pool-size=2");
  }

  private String schemaWithTable() {
    String schema = TestDatabase.newSchema("spring_ac");
    schemas.add(schema);
    return schema;
  }

  private String emptySchema() throws SQLException {
    String schema = ("spring_ac_empty_" + UUID.randomUUID().toString().substring(0, 8));
    try (Connection connection = DriverManager.getConnection(TestDatabase.baseUrl());
        Statement statement = connection.createStatement()) {
      statement.execute("CREATE SCHEMA " + schema.toLowerCase(Locale.ROOT));
    }
    schemas.add(schema);
    return schema;
  }

  @AfterEach
  void dropSchemas() {
    schemas.forEach(TestDatabase::dropSchema);
  }

  @Test
  void propertyDefaultsAreTheCoresConstants() {
    runner(schemaWithTable())
        .run(
            context -> {
              ConsumerDedupProperties properties = context.getBean(ConsumerDedupProperties.class);
              assertThat(properties.isEnabled()).isTrue();
              assertThat(properties.getTableName()).isEqualTo(JdbcDedupStore.DEFAULT_TABLE_NAME);
              assertThat(properties.getLease()).isEqualTo(IdempotentExecutor.DEFAULT_LEASE);
              assertThat(properties.getRetention())
                  .isEqualTo(IdempotentExecutor.DEFAULT_SUCCESS_RETENTION);
              assertThat(properties.getFailedRetention())
                  .isEqualTo(IdempotentExecutor.DEFAULT_FAILED_RETENTION);
              assertThat(properties.getMode()).isEqualTo(IdempotentExecutor.DEFAULT_MODE);
              assertThat(properties.getInProgressPolicy())
                  .isEqualTo(IdempotentExecutor.DEFAULT_IN_PROGRESS_POLICY);
              assertThat(properties.getWaitTimeout())
                  .isEqualTo(IdempotentExecutor.DEFAULT_WAIT_TIMEOUT);
              assertThat(properties.getConflictPolicy())
                  .isEqualTo(IdempotentExecutor.DEFAULT_CONFLICT_POLICY);
              assertThat(properties.getMissingKeyPolicy()).isEqualTo(MissingKeyPolicy.FAIL);
              assertThat(properties.getMaxAttempts())
                  .isEqualTo(IdempotentListenerInterceptor.DEFAULT_MAX_ATTEMPTS);
              assertThat(properties.getOwnerId()).isNull();
              assertThat(properties.getInitializeSchema())
                  .isEqualTo(ConsumerDedupProperties.SchemaInitialization.NEVER);
              assertThat(properties.getStore().getRetryMaxAttempts())
                  .isEqualTo(JdbcDedupStore.DEFAULT_RETRY_MAX_ATTEMPTS);
              assertThat(properties.getStore().getRetryInitialBackoff())
                  .isEqualTo(JdbcDedupStore.DEFAULT_RETRY_INITIAL_BACKOFF);
              assertThat(properties.getStore().getRetryMaxBackoff())
                  .isEqualTo(JdbcDedupStore.DEFAULT_RETRY_MAX_BACKOFF);
              assertThat(properties.getCleanup().isEnabled()).isTrue();
              assertThat(properties.getCleanup().getInterval())
                  .isEqualTo(DedupJanitor.DEFAULT_INTERVAL);
              assertThat(properties.getCleanup().getBatchSize())
                  .isEqualTo(DedupJanitor.DEFAULT_BATCH_SIZE);
              assertThat(properties.getCleanup().getMaxBatchesPerRun())
                  .isEqualTo(DedupJanitor.DEFAULT_MAX_BATCHES_PER_RUN);

              // ... and the engine built from them has the core's defaults too.
              IdempotentExecutor executor =
                  context.getBean(IdempotentExecutors.class).defaultExecutor();
              assertThat(executor.lease()).isEqualTo(IdempotentExecutor.DEFAULT_LEASE);
              assertThat(executor.successRetention())
                  .isEqualTo(IdempotentExecutor.DEFAULT_SUCCESS_RETENTION);
              assertThat(executor.mode()).isEqualTo(DedupMode.SEPARATE);
            });
  }

  @Test
  void propertiesReachTheCoreBuilders() throws SQLException {
    String schema = schemaWithTable();
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement()) {
      statement.execute("CREATE TABLE other_dedup (LIKE consumer_dedup INCLUDING ALL)");
    }
    runner(schema)
        .withPropertyValues(
            "consumer-dedup.lease=42s",
            "consumer-dedup.retention=2d",
            "consumer-dedup.failed-retention=3d",
            "consumer-dedup.in-progress-policy=wait",
            "consumer-dedup.owner-id=billing-7",
            "consumer-dedup.table-name=other_dedup")
        .run(
            context -> {
              IdempotentExecutor executor =
                  context.getBean(IdempotentExecutors.class).defaultExecutor();
              assertThat(executor.lease()).isEqualTo(Duration.ofSeconds(42));
              assertThat(executor.successRetention()).isEqualTo(Duration.ofDays(2));
              assertThat(executor.failedRetention()).isEqualTo(Duration.ofDays(3));
              assertThat(executor.inProgressPolicy().name()).isEqualTo("WAIT");
              assertThat(executor.ownerId()).isEqualTo("billing-7");
              assertThat(context.getBean(JdbcDedupStore.class).tableName())
                  .isEqualTo("other_dedup");
            });
  }

  @Test
  void backsOffWhenTheApplicationDefinesItsOwnBeans() {
    runner(schemaWithTable())
        .withUserConfiguration(OwnBeans.class)
        .run(
            context -> {
              assertThat(context).hasSingleBean(DedupStore.class);
              assertThat(context.getBean(DedupStore.class)).isSameAs(OwnBeans.store);
              assertThat(context.getBean(DedupJanitor.class)).isSameAs(OwnBeans.janitor);
              assertThat(context.getBean(CommonErrorHandler.class))
                  .isSameAs(context.getBean("ownErrorHandler"));
              assertThat(context).doesNotHaveBean("dedupDefaultErrorHandler");
              // The executors run over the application's store.
              assertThat(context.getBean(IdempotentExecutors.class).defaultExecutor().store())
                  .isSameAs(OwnBeans.store);
            });
  }

  @Test
  void transactionalClaimsGoToTheTableOfTheApplicationsOwnJdbcStore() throws SQLException {
    String schema = schemaWithTable();
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement()) {
      statement.execute("CREATE TABLE own_dedup (LIKE consumer_dedup INCLUDING ALL)");
    }
    runner(schema)
        .withUserConfiguration(OwnTableStore.class)
        .withPropertyValues("consumer-dedup.mode=transactional")
        .run(
            context -> {
              IdempotentExecutor executor =
                  context.getBean(IdempotentExecutors.class).defaultExecutor();
              assertThat(executor.mode()).isEqualTo(DedupMode.TRANSACTIONAL);
              // The verifier, the janitor and the endpoint all look at own_dedup: a claim written
              // to consumer-dedup.table-name instead would be invisible to them, and a key claimed
              // by a SEPARATE listener would run again under a TRANSACTIONAL one.
              assertThat(((JdbcDedupStore) executor.store()).tableName())
                  .as("the table of TRANSACTIONAL claims")
                  .isEqualTo("own_dedup");
              DataSource dataSource = context.getBean(DataSource.class);
              new TransactionTemplate(new DataSourceTransactionManager(dataSource))
                  .executeWithoutResult(
                      status -> executor.execute(DedupKey.of("payment", "TX-OWN"), () -> "done"));
              assertThat(
                      new JdbcTemplate(dataSource)
                          .queryForObject(
                              "SELECT count(*) FROM own_dedup WHERE biz_key = 'TX-OWN'",
                              Integer.class))
                  .isOne();
            });
  }

  @Test
  void schemaInitializationCreatesTheTableOfTheApplicationsOwnJdbcStore() throws Exception {
    runner(emptySchema())
        .withUserConfiguration(OwnTableStore.class)
        .withPropertyValues("consumer-dedup.initialize-schema=always")
        .run(
            context -> {
              assertThat(context).hasNotFailed();
              assertThat(
                      new JdbcTemplate(context.getBean(DataSource.class))
                          .queryForObject(
                              "SELECT count(*) FROM information_schema.tables"
                                  + " WHERE table_name = 'own_dedup'"
                                  + " AND table_schema = current_schema()",
                              Integer.class))
                  .isOne();
            });
  }

  @Configuration(proxyBeanMethods = false)
  static class OwnTableStore {
    @Bean
    JdbcDedupStore ownStore(DataSource dataSource) {
      return JdbcDedupStore.builder(dataSource).tableName("own_dedup").build();
    }
  }

  @Test
  void separateClaimsStayOutOfTheCallersTransactionEvenOverATransactionAwareDataSource() {
    String schema = schemaWithTable();
    try (HikariDataSource pool = TestDatabase.dataSource(schema, 3)) {
      separateClaimsOver(new TransactionAwareDataSourceProxy(pool));
    }
  }

  private void separateClaimsOver(DataSource transactionAware) {
    new ApplicationContextRunner()
        .withConfiguration(AutoConfigurations.of(ConsumerDedupAutoConfiguration.class))
        .withBean(DataSource.class, () -> transactionAware)
        .run(
            context -> {
              DataSource dataSource = context.getBean(DataSource.class);
              JdbcTemplate jdbc = new JdbcTemplate(dataSource);
              jdbc.execute("CREATE TABLE business (note text)");
              IdempotentExecutor executor =
                  context.getBean(IdempotentExecutors.class).defaultExecutor();
              TransactionTemplate transaction =
                  new TransactionTemplate(new DataSourceTransactionManager(dataSource));
              transaction.executeWithoutResult(
                  status -> {
                    jdbc.update("INSERT INTO business VALUES ('written, then rolled back')");
                    executor.execute(DedupKey.of("payment", "TX-SEP"), () -> "done");
                    status.setRollbackOnly();
                  });
              // The claim ran on a connection of its own: it neither committed the caller's
              // insert nor was rolled back with it.
              assertThat(jdbc.queryForObject("SELECT count(*) FROM business", Integer.class))
                  .isZero();
              assertThat(
                      executor
                          .store()
                          .find(DedupKey.of("payment", "TX-SEP"))
                          .orElseThrow()
                          .status())
                  .isEqualTo(DedupStatus.SUCCESS);
            });
  }

  @Test
  void disabledByProperty() {
    runner(schemaWithTable())
        .withPropertyValues("consumer-dedup.enabled=false")
        .run(
            context -> {
              assertThat(context).hasNotFailed();
              assertThat(context).doesNotHaveBean(ConsumerDedupProperties.class);
              assertThat(context).doesNotHaveBean(DedupStore.class);
              assertThat(context).doesNotHaveBean(IdempotentListenerInterceptor.class);
              assertThat(context).doesNotHaveBean(DefaultErrorHandler.class);
            });
  }

  @Test
  void disabledByPropertyWithAnOwnJdbcStoreAndActuatorStillStarts() {
    runner(schemaWithTable())
        .withConfiguration(AutoConfigurations.of(ConsumerDedupActuatorAutoConfiguration.class))
        .withUserConfiguration(OwnTableStore.class)
        .withPropertyValues("consumer-dedup.enabled=false")
        .run(
            context -> {
              assertThat(context).hasNotFailed();
              assertThat(context).doesNotHaveBean(ConsumerDedupHealthIndicator.class);
            });
  }

  @Test
  void absentWithoutDataSource() {
    new ApplicationContextRunner()
        .withConfiguration(AutoConfigurations.of(ConsumerDedupAutoConfiguration.class))
        .run(context -> assertThat(context).doesNotHaveBean(DedupStore.class));
  }

  @Test
  void everyListenerContainerIsPreparedBeforeItStarts() {
    runner(schemaWithTable())
        .withConfiguration(AutoConfigurations.of(KafkaAutoConfiguration.class))
        .withUserConfiguration(OwnErrorHandler.class, PlainListener.class)
        .withPropertyValues("spring.kafka.listener.auto-startup=false")
        .run(
            context -> {
              AbstractMessageListenerContainer<?, ?> container =
                  (AbstractMessageListenerContainer<?, ?>)
                      context
                          .getBean(KafkaListenerEndpointRegistry.class)
                          .getListenerContainer("plain");
              // The application's handler, composed with: classified, and wrapped so that
              // records to retry later are held instead of recovered.
              assertThat(container.getCommonErrorHandler())
                  .isInstanceOfSatisfying(
                      RetryLaterErrorHandler.class,
                      handler -> assertThat(handler.delegate()).isSameAs(OwnErrorHandler.handler));
              assertThat(
                      OwnErrorHandler.handler.removeClassification(DedupKeyMissingException.class))
                  .isFalse();
              assertThat(
                      OwnErrorHandler.handler.removeClassification(
                          UnsupportedOperationException.class))
                  .as("the application's own classification")
                  .isFalse();
              assertThat(container.getAfterRollbackProcessor())
                  .isInstanceOf(RetryLaterAfterRollbackProcessor.class);
              assertThat(container.getRecordInterceptor())
                  .isInstanceOf(CurrentRecordInterceptor.class);
            });
  }

  @Test
  void janitorPurgesExpiredRecordsOnScheduleCountsThemAndStopsWithTheContext() {
    String schema = schemaWithTable();
    // Another test class's janitor may still finish a run in this JVM (a run in flight ends after
    // its context closed): only the thread this context started must stop with it.
    List<Thread> before = janitorThreads();
    List<Thread> started = new ArrayList<>();
    runner(schema)
        .withBean(SimpleMeterRegistry.class)
        .withPropertyValues("consumer-dedup.cleanup.interval=200ms")
        .run(
            context -> {
              JdbcTemplate jdbc = new JdbcTemplate(context.getBean(DataSource.class));
              // Created 8 days ago under the default retention of 7 days, as a writer would.
              jdbc.update(
                  "INSERT INTO consumer_dedup (biz_type, biz_key, status, attempts, owner,"
                      + " created_at, expires_at) VALUES ('payment', 'OLD-1', 'SUCCESS', 1,"
                      + " 'test', now() - interval '8 days', now() - interval '1 day')");
              DedupStore store = context.getBean(DedupStore.class);
              await()
                  .atMost(Duration.ofSeconds(10))
                  .until(() -> store.find(DedupKey.of("payment", "OLD-1")).isEmpty());
              SimpleMeterRegistry registry = context.getBean(SimpleMeterRegistry.class);
              await()
                  .atMost(Duration.ofSeconds(5))
                  .until(
                      () ->
                          registry.find(MicrometerDedupListener.PURGED).counter() != null
                              && registry.find(MicrometerDedupListener.PURGED).counter().count()
                                  == 1);
              // Each run measures the backlog first: the gauges exist, and after the purge a
              // later run finds nothing expired.
              await()
                  .atMost(Duration.ofSeconds(5))
                  .until(
                      () ->
                          registry.find(MicrometerDedupListener.PURGE_BACKLOG).gauge() != null
                              && registry
                                      .find(MicrometerDedupListener.PURGE_BACKLOG)
                                      .gauge()
                                      .value()
                                  == 0);
              assertThat(context.getBean(DedupJanitor.class).lastBacklog())
                  .hasValueSatisfying(backlog -> assertThat(backlog.behind()).isFalse());
              janitorThreads().stream().filter(t -> !before.contains(t)).forEach(started::add);
              assertThat(started).isNotEmpty();
            });
    await().atMost(Duration.ofSeconds(10)).until(() -> started.stream().noneMatch(Thread::isAlive));
  }

  @Test
  void theJanitorsBatchesStopAtTheShortestRetentionTheExecutorsWrite() {
    runner(schemaWithTable())
        .withPropertyValues(
            "consumer-dedup.retention=3d",
            "consumer-dedup.failed-retention=2d",
            "consumer-dedup.cleanup.interval=1h")
        .run(
            context ->
                assertThat(context.getBean(DedupJanitor.class).shortestRetention())
                    .contains(Duration.ofDays(2)));
    runner(schemaWithTable())
        .withPropertyValues("consumer-dedup.cleanup.interval=1h")
        .run(
            context ->
                assertThat(context.getBean(DedupJanitor.class).shortestRetention())
                    .contains(IdempotentExecutor.DEFAULT_SUCCESS_RETENTION));
  }

  @Test
  void cleanupDisabledMeansNoJanitor() {
    runner(schemaWithTable())
        .withPropertyValues("consumer-dedup.cleanup.enabled=false")
        .run(context -> assertThat(context).doesNotHaveBean(DedupJanitor.class));
  }

  @Test
  void metricsAppearInTheRegistryWhenOneExists() {
    runner(schemaWithTable())
        .withBean(SimpleMeterRegistry.class)
        .run(
            context -> {
              IdempotentExecutor executor =
                  context.getBean(IdempotentExecutors.class).defaultExecutor();
              executor.execute(DedupKey.of("payment", "M-1"), () -> "done");
              executor.execute(DedupKey.of("payment", "M-1"), () -> "done");
              SimpleMeterRegistry registry = context.getBean(SimpleMeterRegistry.class);
              assertThat(
                      registry
                          .get(MicrometerDedupListener.OUTCOMES)
                          .tags("biz_type", "payment", "outcome", "processed")
                          .counter()
                          .count())
                  .isEqualTo(1);
              assertThat(
                      registry
                          .get(MicrometerDedupListener.OUTCOMES)
                          .tags("biz_type", "payment", "outcome", "duplicate")
                          .counter()
                          .count())
                  .isEqualTo(1);
              assertThat(
                      registry
                          .get(MicrometerDedupListener.CLAIM_TIMER)
                          .tags("biz_type", "payment")
                          .timer()
                          .count())
                  .isEqualTo(2);
            });
  }

  @Test
  void noMetricsListenerWithoutRegistry() {
    runner(schemaWithTable())
        .run(context -> assertThat(context).doesNotHaveBean(MicrometerDedupListener.class));
  }

  @Test
  void schemaInitializationAlwaysCreatesAMissingTableUnderItsConfiguredName() throws Exception {
    String schema = emptySchema();
    ApplicationContextRunner always =
        runner(schema)
            .withPropertyValues(
                "consumer-dedup.initialize-schema=always",
                "consumer-dedup.table-name=payments_dedup");
    always.run(
        context -> {
          IdempotentExecutor executor =
              context.getBean(IdempotentExecutors.class).defaultExecutor();
          assertThat(executor.execute(DedupKey.of("payment", "S-1"), () -> "ok").outcome())
              .isEqualTo(Outcome.PROCESSED);
          assertThat(executor.store().find(DedupKey.of("payment", "S-1")).orElseThrow().status())
              .isEqualTo(DedupStatus.SUCCESS);
          JdbcTemplate jdbc = new JdbcTemplate(context.getBean(DataSource.class));
          assertThat(
                  jdbc.queryForList(
                      "SELECT conname FROM pg_constraint WHERE conrelid ="
                          + " 'payments_dedup'::regclass ORDER BY conname",
                      String.class))
              .containsExactly(
                  "payments_dedup_attempts_ck", "payments_dedup_pk", "payments_dedup_status_ck");
          assertThat(
                  jdbc.queryForObject(
                      "SELECT count(*) FROM pg_indexes WHERE indexname ="
                          + " 'payments_dedup_created_idx'",
                      Integer.class))
              .isEqualTo(1);
        });
    // A second start finds the table and leaves it (and its rows) alone.
    always.run(
        context ->
            assertThat(
                    context
                        .getBean(IdempotentExecutors.class)
                        .store()
                        .find(DedupKey.of("payment", "S-1")))
                .isPresent());
  }

  @Test
  void schemaInitializationNeverByDefault() throws Exception {
    String schema = emptySchema();
    runner(schema)
        .run(
            context ->
                assertThat(context)
                    .getFailure()
                    .rootCause()
                    .hasMessageContaining("The dedup table consumer_dedup does not exist"));
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement();
        java.sql.ResultSet row =
            statement.executeQuery("SELECT to_regclass('consumer_dedup') IS NULL")) {
      row.next();
      assertThat(row.getBoolean(1)).as("no table was created").isTrue();
    }
  }

  @Test
  void invalidIdempotentAnnotationFailsStartupNamingTheMethod() {
    runner(schemaWithTable())
        .withBean(BadListener.class)
        .run(
            context ->
                assertThat(context)
                    .getFailure()
                    .rootCause()
                    .hasMessageContaining("BadListener#onRecord")
                    .hasMessageContaining("exactly one of header and key"));
  }

  @Test
  void configurationMetadataIsGeneratedForIdes() throws Exception {
    try (InputStream in =
        getClass()
            .getClassLoader()
            .getResourceAsStream("META-INF/spring-configuration-metadata.json")) {
      assertThat(in).isNotNull();
      String metadata = new String(in.readAllBytes(), StandardCharsets.UTF_8);
      assertThat(metadata)
          .contains("\"consumer-dedup.lease\"")
          .contains("\"consumer-dedup.table-name\"")
          .contains("\"consumer-dedup.cleanup.batch-size\"")
          .contains("\"consumer-dedup.store.retry-max-attempts\"")
          .contains("\"consumer-dedup.initialize-schema\"");
    }
  }

  @Test
  void defaultsShownToIdesAreTheDefaultsBound() throws Exception {
    String metadata;
    try (InputStream in =
        getClass()
            .getClassLoader()
            .getResourceAsStream("META-INF/spring-configuration-metadata.json")) {
      metadata = new String(in.readAllBytes(), StandardCharsets.UTF_8);
    }
    // The library's own properties (the metadata also describes
    // management.endpoint.consumerdedup.*).
    List<Map<String, Object>> properties =
        JsonPath.<List<Map<String, Object>>>read(metadata, "$.properties[*]").stream()
            .filter(property -> ((String) property.get("name")).startsWith("consumer-dedup."))
            .toList();
    Map<String, Object> shown = new HashMap<>();
    for (Map<String, Object> property : properties) {
      if (property.get("defaultValue") != null) {
        shown.put((String) property.get("name"), property.get("defaultValue"));
      }
    }
    // Every property but owner-id (generated per instance), shared-biz-types (empty) and
    // data-source (the only or the primary DataSource) shows its default.
    assertThat(properties).hasSize(34);
    assertThat(shown)
        .hasSize(31)
        .doesNotContainKeys(
            "consumer-dedup.owner-id",
            "consumer-dedup.shared-biz-types",
            "consumer-dedup.data-source");

    ConsumerDedupProperties bound =
        new Binder(new MapConfigurationPropertySource(shown))
            .bind("consumer-dedup", ConsumerDedupProperties.class)
            .get();
    assertThat(bound).usingRecursiveComparison().isEqualTo(new ConsumerDedupProperties());
  }

  private static List<Thread> janitorThreads() {
    return Thread.getAllStackTraces().keySet().stream()
        .filter(t -> t.getName().equals("consumer-dedup-janitor") && t.isAlive())
        .toList();
  }

  @Configuration(proxyBeanMethods = false)
  static class OwnBeans {
    static DedupStore store;
    static DedupJanitor janitor;

    @Bean
    DedupStore ownStore(DataSource dataSource) {
      store = JdbcDedupStore.builder(dataSource).build();
      return store;
    }

    @Bean
    DedupJanitor ownJanitor(DedupStore store) {
      janitor = DedupJanitor.builder(store).build();
      return janitor;
    }

    @Bean
    CommonErrorHandler ownErrorHandler() {
      return new DefaultErrorHandler();
    }
  }

  @Configuration(proxyBeanMethods = false)
  static class OwnErrorHandler {
    static DefaultErrorHandler handler;

    @Bean
    DefaultErrorHandler ownErrorHandler() {
      handler = new DefaultErrorHandler();
      handler.addNotRetryableExceptions(UnsupportedOperationException.class);
      return handler;
    }
  }

  @Configuration(proxyBeanMethods = false)
  static class PlainListener {
    @Bean
    Object plainListener() {
      return new Object() {
        @KafkaListener(id = "plain", topics = "plain")
        void onRecord(String value) {}
      };
    }
  }

  static class BadListener {
    @Idempotent(bizType = "payment")
    public void onRecord(ConsumerRecord<String, String> record) {}
  }
}
