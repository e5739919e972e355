package io.consumerdedup.test.spring;

import io.consumerdedup.test.RedeliveryReport;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.beans.factory.config.BeanDefinition;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.context.annotation.Role;

/**
 * What {@link RedeliverEachRecord} imports: the {@link RedeliveryReport} bean and the
 * post-processor that makes each {@code @Idempotent} listener take every record twice.
 */
@Configuration(proxyBeanMethods = false)
public class RedeliveryConfiguration {

  @Bean
  RedeliveryReport redeliveryReport() {
    return new RedeliveryReport();
  }

  @Bean
  @Role(BeanDefinition.ROLE_INFRASTRUCTURE)
  static RedeliveringListenerPostProcessor redeliveringListenerPostProcessor(
      ObjectProvider<RedeliveryReport> report) {
    return new RedeliveringListenerPostProcessor(report::getObject);
  }
}
