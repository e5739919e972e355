package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.core.DedupAdmin;
import io.consumerdedup.jdbc.DedupJanitor;
import io.consumerdedup.jdbc.JdbcDedupAdmin;
import io.consumerdedup.jdbc.JdbcDedupStore;
import javax.sql.DataSource;
import org.springframework.beans.factory.ListableBeanFactory;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.boot.actuate.autoconfigure.endpoint.condition.ConditionalOnAvailableEndpoint;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBooleanProperty;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.health.autoconfigure.contributor.ConditionalOnEnabledHealthIndicator;
import org.springframework.boot.health.contributor.HealthIndicator;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;

/**
 * The {@code consumerdedup} Actuator endpoint and health indicator, when the application has
 * Actuator (an optional dependency of this module) and a {@link JdbcDedupStore}.
 */
@AutoConfiguration(after = ConsumerDedupAutoConfiguration.class)
@ConditionalOnClass(name = "org.springframework.boot.actuate.endpoint.annotation.Endpoint")
@ConditionalOnBean(JdbcDedupStore.class)
// Off with the rest: without it, an application with a store of its own failed to start for want of
// the properties that consumer-dedup.enabled=false leaves out.
@ConditionalOnBooleanProperty(name = "consumer-dedup.enabled", matchIfMissing = true)
public class ConsumerDedupActuatorAutoConfiguration {

  @Bean
  @ConditionalOnMissingBean
  public DedupAdmin dedupAdmin(JdbcDedupStore store) {
    return JdbcDedupAdmin.of(store);
  }

  @Bean
  @ConditionalOnMissingBean
  @ConditionalOnAvailableEndpoint(ConsumerDedupEndpoint.class)
  public ConsumerDedupEndpoint consumerDedupEndpoint(
      DedupAdmin admin,
      JdbcDedupStore store,
      ConsumerDedupProperties properties,
      ObjectProvider<DedupJanitor> janitor) {
    return new ConsumerDedupEndpoint(
        admin, store, properties.getAdmin().isWriteEnabled(), janitor.getIfUnique());
  }

  /** Apart, so that an application with Actuator but without its health module still starts. */
  @Configuration(proxyBeanMethods = false)
  @ConditionalOnClass(HealthIndicator.class)
  static class Health {
    @Bean
    @ConditionalOnMissingBean(name = "consumerdedupHealthIndicator")
    @ConditionalOnEnabledHealthIndicator("consumerdedup")
    public ConsumerDedupHealthIndicator consumerdedupHealthIndicator(
        JdbcDedupStore store,
        ObjectProvider<DedupJanitor> janitor,
        ConsumerDedupProperties properties,
        ObjectProvider<DataSource> dataSources,
        ListableBeanFactory beanFactory) {
      DataSource dataSource;
      try {
        dataSource =
            ConsumerDedupAutoConfiguration.dedupDataSource(dataSources, beanFactory, properties);
      } catch (RuntimeException e) {
        dataSource = null; // the store's own, of the application's choosing: no lock looked for
      }
      return new ConsumerDedupHealthIndicator(
          store, janitor.getIfUnique(), properties.getHealthTimeout(), dataSource);
    }
  }
}
