package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.spring.Idempotent;
import java.lang.reflect.Method;
import javax.sql.DataSource;
import org.springframework.aop.support.AopUtils;
import org.springframework.beans.factory.ListableBeanFactory;
import org.springframework.beans.factory.config.BeanFactoryPostProcessor;
import org.springframework.beans.factory.config.BeanPostProcessor;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Conditional;
import org.springframework.core.annotation.AnnotatedElementUtils;
import org.springframework.core.env.Environment;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.util.ReflectionUtils;

/**
 * Stops an application whose {@link Idempotent} listeners {@link ConsumerDedupAutoConfiguration}
 * cannot protect, because the application has no DataSource for the dedup table (most often
 * spring-boot-starter-jdbc left out): the annotation alone does nothing, and every redelivered
 * record would be applied again with nothing in the log to say so. {@code
 * consumer-dedup.enabled=false} runs such listeners without dedup on purpose.
 */
@AutoConfiguration(
    after = ConsumerDedupAutoConfiguration.class,
    afterName = "org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration")
@ConditionalOnClass(KafkaListener.class)
@ConditionalOnMissingBean(DataSource.class)
@Conditional(DedupSwitches.Enabled.class)
public class IdempotentListenersWithoutDataSourceAutoConfiguration {

  /**
   * Refuses {@code consumer-dedup.enabled} that is neither true nor false here too, where no
   * DataSource leaves the main configuration out: run before any bean, lazy or not.
   */
  @Bean
  static BeanFactoryPostProcessor dedupSwitchesCheck(Environment environment) {
    return beanFactory -> DedupSwitches.check(environment);
  }

  @Bean
  static BeanPostProcessor unprotectedIdempotentListeners(ListableBeanFactory beanFactory) {
    return new BeanPostProcessor() {
      @Override
      public Object postProcessAfterInitialization(Object bean, String beanName) {
        Class<?> type = AopUtils.getTargetClass(bean);
        ReflectionUtils.doWithMethods(
            type,
            method -> {
              throw unprotected(type, method, beanFactory);
            },
            method -> AnnotatedElementUtils.hasAnnotation(method, Idempotent.class));
        return bean;
      }
    };
  }

  private static DedupConfigurationException unprotected(
      Class<?> type, Method method, ListableBeanFactory beanFactory) {
    String listener = "@Idempotent listener " + type.getName() + "#" + method.getName();
    String offOnPurpose =
        "; set consumer-dedup.enabled=false to run @Idempotent listeners without dedup on purpose";
    // The conditions judge a bean by its declared type, creating nothing: a FactoryBean whose
    // object
    // type shows only once it is created (JndiObjectFactoryBean's), or a DataSource registered
    // after
    // the auto-configurations, is one they do not see, and "no DataSource bean" sent its owner
    // looking for a starter that was there. Now, the application about to stop, it may be created.
    String[] late = dataSourcesNow(beanFactory);
    if (late.length > 0) {
      return new DedupConfigurationException(
          listener
              + " would run without dedup: the application's DataSource bean '"
              + String.join("', '", late)
              + "' was not known to be one when the auto-configurations' conditions were evaluated"
              + " (a FactoryBean whose object type shows only once it is created, such as"
              + " JndiObjectFactoryBean, or a DataSource registered after the auto-configurations),"
              + " so consumer-dedup's auto-configuration is off. Declare it with its type: a @Bean"
              + " method that returns DataSource (JndiDataSourceLookup for JNDI), or a"
              + " FactoryBean<DataSource>"
              + offOnPurpose,
          null,
          null);
    }
    return new DedupConfigurationException(
        listener
            + " would run without dedup: the application has no DataSource bean, which"
            + " consumer-dedup needs for its table, so its auto-configuration is off. Add"
            + " spring-boot-starter-jdbc and the database's driver with spring.datasource.url (the"
            + " README's quick start), or define a DataSource bean"
            + offOnPurpose,
        null,
        null);
  }

  private static String[] dataSourcesNow(ListableBeanFactory beanFactory) {
    try {
      return beanFactory.getBeanNamesForType(DataSource.class, true, true);
    } catch (RuntimeException e) {
      // A factory that cannot be created to tell its type: the refusal stands without the name.
      return new String[0];
    }
  }
}
