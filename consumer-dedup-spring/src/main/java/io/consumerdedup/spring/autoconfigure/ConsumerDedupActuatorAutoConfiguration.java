package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.core.DedupAdmin;
import io.consumerdedup.jdbc.DedupJanitor;
import io.consumerdedup.jdbc.JdbcDedupAdmin;
import io.consumerdedup.jdbc.JdbcDedupStore;
import javax.sql.DataSource;
import org.springframework.beans.factory.ListableBeanFactory;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.beans.factory.config.ConfigurableListableBeanFactory;
import org.springframework.boot.actuate.autoconfigure.endpoint.condition.ConditionalOnAvailableEndpoint;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.health.autoconfigure.contributor.ConditionalOnEnabledHealthIndicator;
import org.springframework.boot.health.contributor.HealthIndicator;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Conditional;
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
@Conditional(DedupSwitches.Enabled.class)
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
      DataSource dataSource = null; // no lock looked for, the probes through the store itself
      if (storeBuiltHere(beanFactory)) {
        try {
          dataSource =
              ConsumerDedupAutoConfiguration.dedupDataSource(dataSources, beanFactory, properties);
        } catch (RuntimeException e) {
          // none to be told apart: as for a store of the application's own
        }
      }
      return new ConsumerDedupHealthIndicator(
          store, janitor.getIfUnique(), properties.getHealthTimeout(), dataSource);
    }

    /**
     * Whether the store is the one {@link ConsumerDedupAutoConfiguration} built over the DataSource
     * it picks. A store of the application's own may be over another DataSource (not a bean, or not
     * the primary one): probes over the picked one then checked another database's table, DOWN for
     * a table that works or UP for one that does not.
     */
    private static boolean storeBuiltHere(ListableBeanFactory beanFactory) {
      if (!(beanFactory instanceof ConfigurableListableBeanFactory configurable)) {
        return false;
      }
      String[] stores = configurable.getBeanNamesForType(JdbcDedupStore.class, false, false);
      String[] configurations =
          configurable.getBeanNamesForType(ConsumerDedupAutoConfiguration.class, false, false);
      return stores.length == 1
          && configurations.length == 1
          && configurable.containsBeanDefinition(stores[0])
          && configurations[0].equals(
              configurable.getBeanDefinition(stores[0]).getFactoryBeanName());
    }
  }
}
