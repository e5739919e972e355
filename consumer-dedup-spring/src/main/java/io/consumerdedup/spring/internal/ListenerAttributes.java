package io.consumerdedup.spring.internal;

import org.springframework.beans.factory.config.BeanExpressionContext;
import org.springframework.beans.factory.config.BeanExpressionResolver;
import org.springframework.beans.factory.config.ConfigurableBeanFactory;

/** Attributes of {@code @KafkaListener} as spring-kafka reads them. */
public final class ListenerAttributes {
  private ListenerAttributes() {}

  /**
   * An attribute as spring-kafka resolves it: placeholders, then SpEL; empty if that gives null.
   */
  public static String resolve(ConfigurableBeanFactory beanFactory, String value) {
    if (value.isEmpty()) {
      return value;
    }
    String resolved = beanFactory.resolveEmbeddedValue(value);
    BeanExpressionResolver expressions = beanFactory.getBeanExpressionResolver();
    Object evaluated =
        expressions == null || resolved == null
            ? resolved
            : expressions.evaluate(resolved, new BeanExpressionContext(beanFactory, null));
    return evaluated == null ? "" : evaluated.toString();
  }
}
