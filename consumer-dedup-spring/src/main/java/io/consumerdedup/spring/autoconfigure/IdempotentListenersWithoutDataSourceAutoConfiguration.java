package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.spring.Idempotent;
import java.lang.reflect.Method;
import javax.sql.DataSource;
import org.springframework.aop.support.AopUtils;
import org.springframework.beans.factory.config.BeanPostProcessor;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBooleanProperty;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.context.annotation.Bean;
import org.springframework.core.annotation.AnnotatedElementUtils;
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
@ConditionalOnBooleanProperty(name = "consumer-dedup.enabled", matchIfMissing = true)
public class IdempotentListenersWithoutDataSourceAutoConfiguration {

  @Bean
  static BeanPostProcessor unprotectedIdempotentListeners() {
    return new BeanPostProcessor() {
      @Override
      public Object postProcessAfterInitialization(Object bean, String beanName) {
        Class<?> type = AopUtils.getTargetClass(bean);
        ReflectionUtils.doWithMethods(
            type,
            method -> {
              throw unprotected(type, method);
            },
            method -> AnnotatedElementUtils.hasAnnotation(method, Idempotent.class));
        return bean;
      }
    };
  }

  private static DedupConfigurationException unprotected(Class<?> type, Method method) {
    return new DedupConfigurationException(
        "@Idempotent listener "
            + type.getName()
            + "#"
            + method.getName()
            + " would run without dedup: the application has no DataSource bean, which"
            + " consumer-dedup needs for its table, so its auto-configuration is off. Add"
            + " spring-boot-starter-jdbc and the database's driver with spring.datasource.url (the"
            + " README's quick start), or define a DataSource bean; set consumer-dedup.enabled=false"
            + " to run @Idempotent listeners without dedup on purpose",
        null,
        null);
  }
}
