package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.DedupJanitor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.jdbc.SqlDialect;
import io.consumerdedup.micrometer.MicrometerDedupListener;
import io.consumerdedup.spring.IdempotentExecutors;
import io.consumerdedup.spring.IdempotentListenerInterceptor;
import io.consumerdedup.spring.IdempotentListenerPostProcessor;
import io.consumerdedup.spring.ObservationOutcomeTagger;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.observation.ObservationRegistry;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import javax.sql.DataSource;
import org.springframework.beans.factory.BeanFactory;
import org.springframework.beans.factory.BeanFactoryUtils;
import org.springframework.beans.factory.InitializingBean;
import org.springframework.beans.factory.ListableBeanFactory;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.boot.LazyInitializationExcludeFilter;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Conditional;
import org.springframework.context.annotation.Configuration;
import org.springframework.core.env.Environment;
import org.springframework.jdbc.datasource.TransactionAwareDataSourceProxy;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.retrytopic.DestinationTopicResolver;

/**
 * Configures consumer-dedup when a DataSource and spring-kafka are present ({@code
 * consumer-dedup.enabled=false} turns it off): the PostgreSQL store, the executors, the {@link
 * io.consumerdedup.spring.Idempotent} interceptor, error-handler classifications, the retention
 * janitor, metrics when a {@code MeterRegistry} exists, and the outcome tag of listener
 * observations when an {@code ObservationRegistry} exists. Every bean backs off when the
 * application defines its own.
 */
@AutoConfiguration(
    afterName = {
      "org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration",
      "org.springframework.boot.micrometer.metrics.autoconfigure.MetricsAutoConfiguration",
      "org.springframework.boot.micrometer.metrics.autoconfigure.CompositeMeterRegistryAutoConfiguration",
      "org.springframework.boot.micrometer.metrics.autoconfigure.export.simple.SimpleMetricsExportAutoConfiguration",
      "org.springframework.boot.micrometer.observation.autoconfigure.ObservationAutoConfiguration"
    })
@ConditionalOnClass({KafkaListener.class, DataSource.class, JdbcDedupStore.class})
@ConditionalOnBean(DataSource.class)
@Conditional(DedupSwitches.Enabled.class)
@EnableConfigurationProperties(ConsumerDedupProperties.class)
public class ConsumerDedupAutoConfiguration {

  /**
   * Refuses a {@code consumer-dedup.*} name that no property has, before the beans that a misspelt
   * one would leave at their defaults (a table never created, a mode never chosen).
   */
  @Bean
  InitializingBean dedupPropertyNamesCheck(Environment environment) {
    return () -> {
      UnknownDedupProperties.check(environment);
      DedupSwitches.check(environment);
    };
  }

  /**
   * Keeps the start-up checks and the janitor out of {@code spring.main.lazy-initialization=true}:
   * nothing asks for them, so made lazy they never ran, and a misspelt property or a missing table
   * went unnoticed until every record failed or waited.
   */
  @Bean
  static LazyInitializationExcludeFilter dedupEagerBeans() {
    return (name, definition, type) ->
        name.equals("dedupPropertyNamesCheck")
            || (type != null
                && EAGER_TYPES.stream().anyMatch(eager -> eager.isAssignableFrom(type)));
  }

  private static final List<Class<?>> EAGER_TYPES =
      List.of(
          ConsumerDedupProperties.class,
          DedupSchemaInitializer.class,
          DedupTableVerifier.class,
          DedupJanitor.class);

  @Bean
  @ConditionalOnMissingBean
  @Conditional(DedupSwitches.InitializeSchemaAlways.class)
  public DedupSchemaInitializer dedupSchemaInitializer(
      ObjectProvider<DataSource> dataSources,
      ListableBeanFactory beanFactory,
      ConsumerDedupProperties properties,
      ObjectProvider<DedupStore> store) {
    DataSource dataSource = dedupDataSource(dataSources, beanFactory, properties);
    // The table the store uses: a JdbcDedupStore bean of the application's own names its own, and
    // creating consumer-dedup.table-name instead left the application stopped on a missing table.
    DedupStore unique = store.getIfUnique();
    String table =
        unique instanceof JdbcDedupStore own ? own.tableName() : properties.getTableName();
    // A dialect the application's store was built with (behind a proxy that hides the database's
    // name) decides here too.
    SqlDialect dialect = unique instanceof JdbcDedupStore own ? own.dialect().orElse(null) : null;
    return new DedupSchemaInitializer(dataSource, table, dialect);
  }

  @Bean
  @ConditionalOnMissingBean(DedupStore.class)
  public JdbcDedupStore dedupStore(
      ObjectProvider<DataSource> dataSources,
      ListableBeanFactory beanFactory,
      ConsumerDedupProperties properties) {
    DataSource dataSource = dedupDataSource(dataSources, beanFactory, properties);
    // SEPARATE claims need connections of their own: through a transaction-aware proxy, a claim
    // inside a listener's transaction would take (and, switching it to auto-commit, commit) the
    // transaction's connection.
    return storeBuilder(targetOf(dataSource), properties).build();
  }

  /**
   * The DataSource of the dedup table: the one {@code consumer-dedup.data-source} names, else the
   * only or the primary one. An application with several and none of them primary has Spring Boot's
   * own JDBC beans back off; it cannot have consumer-dedup guess which one holds the table.
   */
  static DataSource dedupDataSource(
      ObjectProvider<DataSource> dataSources,
      ListableBeanFactory beanFactory,
      ConsumerDedupProperties properties) {
    String name = properties.getDataSource();
    String[] names =
        BeanFactoryUtils.beanNamesForTypeIncludingAncestors(beanFactory, DataSource.class);
    Arrays.sort(names);
    // Left empty (a YAML key without a value), it chooses nothing, like leaving it out.
    if (name != null && !name.isBlank()) {
      if (!Arrays.asList(names).contains(name)) {
        throw new DedupConfigurationException(
            "consumer-dedup.data-source="
                + name
                + " names no DataSource bean; the application's are "
                + String.join(", ", names),
            null,
            null);
      }
      return beanFactory.getBean(name, DataSource.class);
    }
    DataSource only = dataSources.getIfUnique();
    if (only == null) {
      throw new DedupConfigurationException(
          "consumer-dedup needs the DataSource that holds its table, and the application has "
              + names.length
              + " ("
              + String.join(", ", names)
              + "), no single one of them @Primary: set consumer-dedup.data-source to the name of"
              + " the one that holds the dedup table",
          null,
          null);
    }
    return only;
  }

  private static DataSource targetOf(DataSource dataSource) {
    return dataSource instanceof TransactionAwareDataSourceProxy proxy
            && proxy.getTargetDataSource() != null
        ? proxy.getTargetDataSource()
        : dataSource;
  }

  @Bean
  @ConditionalOnMissingBean
  @ConditionalOnBean(JdbcDedupStore.class)
  public DedupTableVerifier dedupTableVerifier(
      JdbcDedupStore store, ObjectProvider<DedupSchemaInitializer> initializer) {
    return new DedupTableVerifier(store, initializer.getIfAvailable());
  }

  @Bean(destroyMethod = "close")
  @ConditionalOnMissingBean
  public IdempotentExecutors idempotentExecutors(
      DedupStore store,
      ObjectProvider<DataSource> dataSources,
      ListableBeanFactory beanFactory,
      ConsumerDedupProperties properties,
      ObjectProvider<DedupListener> listeners) {
    DataSource dataSource = dedupDataSource(dataSources, beanFactory, properties);
    // TRANSACTIONAL claims must run on the listener's transactional connection: the same
    // DataSource, seen through Spring's transaction-aware proxy (the core stays unaware of Spring).
    DataSource transactional =
        dataSource instanceof TransactionAwareDataSourceProxy
            ? dataSource
            : new TransactionAwareDataSourceProxy(dataSource);
    JdbcDedupStore.Builder transactionalBuilder = storeBuilder(transactional, properties);
    if (store instanceof JdbcDedupStore own) {
      // The application's own JDBC store names the table that the verifier, the janitor and the
      // endpoint see: TRANSACTIONAL claims written to consumer-dedup.table-name instead would
      // escape all three, and split one key's history across two tables.
      transactionalBuilder.tableName(own.tableName()).statementTimeout(own.statementTimeout());
      own.dialect().ifPresent(transactionalBuilder::dialect);
    }
    JdbcDedupStore transactionalStore = transactionalBuilder.build();
    DedupListener listener = DedupListener.composite(listeners.orderedStream().toList());
    return new IdempotentExecutors(
        store,
        transactionalStore,
        targetOf(dataSource),
        builder -> configure(builder, properties, listener),
        properties.getMode());
  }

  @Bean
  @ConditionalOnMissingBean
  public IdempotentListenerInterceptor idempotentListenerInterceptor(
      IdempotentExecutors executors,
      ConsumerDedupProperties properties,
      BeanFactory beanFactory,
      ObjectProvider<ObservationOutcomeTagger> outcomeTagger) {
    IdempotentListenerInterceptor interceptor =
        new IdempotentListenerInterceptor(
            executors,
            properties.getMissingKeyPolicy(),
            properties.getMaxAttempts(),
            properties.isClaimsPerPoll(),
            beanFactory);
    interceptor.tagOutcomesWith(outcomeTagger.getIfAvailable());
    interceptor.asyncListenerTimeout(properties.getAsyncListenerTimeout());
    return interceptor;
  }

  @Bean
  @ConditionalOnMissingBean
  public static IdempotentListenerPostProcessor idempotentListenerPostProcessor(
      ObjectProvider<IdempotentListenerInterceptor> interceptor) {
    return new IdempotentListenerPostProcessor(interceptor::getObject);
  }

  /**
   * Prepares every listener container before it starts: record capture and outcome settlement for
   * {@code @Idempotent} listeners, records that must wait held instead of recovered, rollbacks that
   * leave keys retryable. Composes with the application's error handler and after-rollback
   * processor; without an error handler (and no transaction manager) a container gets
   * spring-kafka's default {@code DefaultErrorHandler}, classified.
   */
  @Bean
  @ConditionalOnMissingBean
  public DedupListenerContainersConfigurer dedupListenerContainersConfigurer(
      ObjectProvider<KafkaListenerEndpointRegistry> registry,
      ObjectProvider<DestinationTopicResolver> retryTopicResolvers,
      ObjectProvider<IdempotentListenerPostProcessor> listeners,
      IdempotentExecutors executors,
      ConsumerDedupProperties properties) {
    return new DedupListenerContainersConfigurer(
        registry, retryTopicResolvers, listeners, executors, properties);
  }

  /**
   * Stops the workers of every {@code @Idempotent} share listener at once as the application stops,
   * before spring-kafka stops the share containers one after the other.
   */
  @Bean
  @ConditionalOnMissingBean
  ShareListenersStopFirst dedupShareListenersStopFirst(
      DedupListenerContainersConfigurer configurer,
      ObjectProvider<KafkaListenerEndpointRegistry> registry) {
    return new ShareListenersStopFirst(configurer, registry);
  }

  @Bean(destroyMethod = "close")
  @ConditionalOnMissingBean
  @Conditional(DedupSwitches.CleanupEnabled.class)
  public DedupJanitor dedupJanitor(
      DedupStore store,
      ConsumerDedupProperties properties,
      ObjectProvider<DedupListener> listeners) {
    ConsumerDedupProperties.Cleanup cleanup = properties.getCleanup();
    DedupJanitor janitor =
        DedupJanitor.builder(store)
            .interval(cleanup.getInterval())
            .batchSize(cleanup.getBatchSize())
            .maxBatchesPerRun(cleanup.getMaxBatchesPerRun())
            .maxRunTime(cleanup.getMaxRunTime())
            .shortestRetention(shortestRetention(properties))
            .listener(DedupListener.composite(listeners.orderedStream().toList()))
            .build();
    janitor.start();
    return janitor;
  }

  /**
   * The shortest retention of the rows the executors configured here write: SUCCESS rows keep the
   * retention, FAILED ones the failed-retention, and a claim the lease plus one of the two. The
   * janitor's batches then stop at rows created that long ago instead of walking every unexpired
   * row to the end of the table's {@code created_at} index.
   */
  private static Duration shortestRetention(ConsumerDedupProperties properties) {
    Duration retention = properties.getRetention();
    Duration failedRetention = properties.getFailedRetention();
    return retention.compareTo(failedRetention) <= 0 ? retention : failedRetention;
  }

  private static JdbcDedupStore.Builder storeBuilder(
      DataSource dataSource, ConsumerDedupProperties properties) {
    ConsumerDedupProperties.Store store = properties.getStore();
    return JdbcDedupStore.builder(dataSource)
        .tableName(properties.getTableName())
        .retryMaxAttempts(store.getRetryMaxAttempts())
        .retryInitialBackoff(store.getRetryInitialBackoff())
        .retryMaxBackoff(store.getRetryMaxBackoff())
        .retryMaxDuration(store.getRetryMaxDuration())
        .statementTimeout(store.getStatementTimeout());
  }

  private static void configure(
      IdempotentExecutor.Builder builder,
      ConsumerDedupProperties properties,
      DedupListener listener) {
    builder
        .lease(properties.getLease())
        .successRetention(properties.getRetention())
        .failedRetention(properties.getFailedRetention())
        .inProgressPolicy(properties.getInProgressPolicy())
        .waitTimeout(properties.getWaitTimeout())
        .conflictPolicy(properties.getConflictPolicy())
        .listener(listener);
    if (properties.getOwnerId() != null) {
      builder.ownerId(properties.getOwnerId());
    }
  }

  /** Metrics, when Micrometer is on the classpath and a registry exists. */
  @Configuration(proxyBeanMethods = false)
  @ConditionalOnClass(MeterRegistry.class)
  @ConditionalOnBean(MeterRegistry.class)
  static class DedupMetricsConfiguration {
    @Bean
    @ConditionalOnMissingBean
    MicrometerDedupListener micrometerDedupListener(MeterRegistry registry) {
      return new MicrometerDedupListener(registry);
    }
  }

  /** The dedup outcome as a tag of spring-kafka's listener observations. */
  @Configuration(proxyBeanMethods = false)
  @ConditionalOnClass(ObservationRegistry.class)
  @ConditionalOnBean(ObservationRegistry.class)
  static class DedupObservationConfiguration {
    @Bean
    @ConditionalOnMissingBean
    ObservationOutcomeTagger observationOutcomeTagger(ObservationRegistry registry) {
      return new ObservationOutcomeTagger(registry);
    }
  }
}
