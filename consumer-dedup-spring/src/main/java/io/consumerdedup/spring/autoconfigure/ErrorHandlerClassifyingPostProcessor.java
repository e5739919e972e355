package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.spring.DedupErrorClassification;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.beans.factory.config.BeanPostProcessor;
import org.springframework.kafka.listener.DefaultErrorHandler;

/**
 * Adds consumer-dedup's classifications to every {@link DefaultErrorHandler} bean, keeping its
 * back-off, recoverer and other classifications: the application's error handler is composed with,
 * never replaced.
 */
public final class ErrorHandlerClassifyingPostProcessor implements BeanPostProcessor {
  private static final Logger log =
      LoggerFactory.getLogger(ErrorHandlerClassifyingPostProcessor.class);

  @Override
  public Object postProcessAfterInitialization(Object bean, String beanName) {
    if (bean instanceof DefaultErrorHandler errorHandler) {
      DedupErrorClassification.applyTo(errorHandler);
      log.debug("Added consumer-dedup's exception classifications to error handler {}", beanName);
    }
    return bean;
  }
}
