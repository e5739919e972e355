package io.consumerdedup.spring;

import java.util.function.Supplier;
import org.aopalliance.intercept.MethodInterceptor;
import org.springframework.aop.framework.autoproxy.AbstractBeanFactoryAwareAdvisingPostProcessor;
import org.springframework.aop.support.AopUtils;
import org.springframework.aop.support.DefaultPointcutAdvisor;
import org.springframework.aop.support.annotation.AnnotationMatchingPointcut;
import org.springframework.core.Ordered;
import org.springframework.util.ReflectionUtils;

/**
 * Proxies beans with {@link Idempotent} methods so that calls to them pass through the {@link
 * IdempotentListenerInterceptor}, and checks each annotation at start-up.
 *
 * <p>On a bean that is already proxied (say for {@code @Transactional}) the interceptor is added
 * after the existing advisors, so it runs inside the transaction: what {@code TRANSACTIONAL} mode
 * needs. It runs before spring-kafka's {@code KafkaListenerAnnotationBeanPostProcessor}, so the
 * listener endpoints invoke the proxy.
 */
public class IdempotentListenerPostProcessor extends AbstractBeanFactoryAwareAdvisingPostProcessor {
  private static final long serialVersionUID = 1L;

  /**
   * @param interceptor supplies the interceptor at the first call, so that this post-processor
   *     (created early, as all are) does not create the DataSource and the store early
   */
  public IdempotentListenerPostProcessor(Supplier<IdempotentListenerInterceptor> interceptor) {
    MethodInterceptor lazy = invocation -> interceptor.get().invoke(invocation);
    this.advisor =
        new DefaultPointcutAdvisor(
            new AnnotationMatchingPointcut(null, Idempotent.class, true), lazy);
    setProxyTargetClass(true);
    setBeforeExistingAdvisors(false);
    setOrder(Ordered.LOWEST_PRECEDENCE - 100);
  }

  @Override
  public Object postProcessAfterInitialization(Object bean, String beanName) {
    Object processed = super.postProcessAfterInitialization(bean, beanName);
    if (processed != bean || AopUtils.isAopProxy(processed)) {
      // Fail at start-up, naming the method, rather than at the first record.
      ReflectionUtils.doWithMethods(
          AopUtils.getTargetClass(processed), IdempotentListenerMethod::of);
    }
    return processed;
  }
}
