package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.spring.CurrentRecordInterceptor;
import org.springframework.beans.factory.config.BeanPostProcessor;
import org.springframework.kafka.config.AbstractKafkaListenerContainerFactory;

/**
 * Adds {@link CurrentRecordInterceptor} to every listener container factory bean, after the record
 * interceptor the factory already has (composed, never replaced), so {@code @Idempotent} listeners
 * whose arguments do not include the record still see its headers.
 */
public final class RecordCapturingFactoryPostProcessor implements BeanPostProcessor {
  @Override
  public Object postProcessAfterInitialization(Object bean, String beanName) {
    if (bean instanceof AbstractKafkaListenerContainerFactory<?, ?, ?> factory) {
      CurrentRecordInterceptor.addTo(factory);
    }
    return bean;
  }
}
