package io.consumerdedup.spring;

import io.consumerdedup.spring.internal.MissingKeyArguments;
import java.time.Duration;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.Function;
import java.util.function.Supplier;
import org.aopalliance.intercept.MethodInterceptor;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.aop.Advisor;
import org.springframework.aop.framework.Advised;
import org.springframework.aop.framework.autoproxy.AbstractBeanFactoryAwareAdvisingPostProcessor;
import org.springframework.aop.support.AopUtils;
import org.springframework.aop.support.DefaultPointcutAdvisor;
import org.springframework.aop.support.annotation.AnnotationMatchingPointcut;
import org.springframework.core.Ordered;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.listener.AbstractMessageListenerContainer;
import org.springframework.util.ReflectionUtils;

/**
 * Proxies beans with {@link Idempotent} methods so that calls to them pass through the {@link
 * IdempotentListenerInterceptor}, and checks each annotation and method signature at start-up.
 *
 * <p>Two advisors, around any that the bean already has (say for {@code @Transactional}): the one
 * for mode SEPARATE goes first, so the claim and its outcome stand outside the listener's
 * transaction (one pool connection at a time per listener thread, and SUCCESS only after the
 * commit); the one for mode TRANSACTIONAL goes last, inside the transaction, which the dedup row
 * joins. This post-processor runs before spring-kafka's {@code
 * KafkaListenerAnnotationBeanPostProcessor}, so the listener endpoints invoke the proxy.
 *
 * <p>Internal: the auto-configuration registers it; it is public only for that. Not API, may change
 * in any release.
 */
public class IdempotentListenerPostProcessor extends AbstractBeanFactoryAwareAdvisingPostProcessor {
  private static final long serialVersionUID = 1L;
  private static final Logger log = LoggerFactory.getLogger(IdempotentListenerPostProcessor.class);

  private final Advisor inside;
  private final Advisor outside;
  private final List<IdempotentListenerMethod> listeners = new CopyOnWriteArrayList<>();

  /**
   * An {@code @Idempotent} listener found at start-up, as the start-up report names it.
   *
   * @param method the class and method
   * @param listenerId the {@code @KafkaListener} id, empty if it has none
   * @param keySource where the key comes from: {@code header 'order-no'}, or the key expression
   * @param overrides its own settings (lease, policies, mode); null ones are the application's
   * @param kafkaListener its {@code @KafkaListener} (of the method, else of its class), unresolved
   * @param caveat why some calls to it may not be deduplicated, empty if none
   */
  public record Listener(
      String method,
      String listenerId,
      String bizType,
      String keySource,
      IdempotentExecutors.Overrides overrides,
      @Nullable KafkaListener kafkaListener,
      String caveat) {}

  /**
   * @param interceptor supplies the interceptor at the first call, so that this post-processor
   *     (created early, as all are) does not create the DataSource and the store early
   */
  public IdempotentListenerPostProcessor(Supplier<IdempotentListenerInterceptor> interceptor) {
    this.inside = advisor(interceptor, IdempotentListenerInterceptor::insideTransactions);
    this.advisor = inside;
    this.outside = advisor(interceptor, IdempotentListenerInterceptor::outsideTransactions);
    setProxyTargetClass(true);
    setBeforeExistingAdvisors(false);
    setOrder(Ordered.LOWEST_PRECEDENCE - 100);
  }

  private static Advisor advisor(
      Supplier<IdempotentListenerInterceptor> interceptor,
      Function<IdempotentListenerInterceptor, MethodInterceptor> position) {
    MethodInterceptor lazy = invocation -> position.apply(interceptor.get()).invoke(invocation);
    return new DefaultPointcutAdvisor(
        new AnnotationMatchingPointcut(null, Idempotent.class, true), lazy);
  }

  /** The {@code @Idempotent} listeners of the beans processed so far. */
  public List<Listener> listeners() {
    return listeners.stream()
        .map(
            l ->
                new Listener(
                    l.name,
                    l.listenerId,
                    l.bizType,
                    l.keySource(),
                    l.overrides,
                    l.kafkaListener,
                    l.selfCallWarning == null
                        ? ""
                        : "deduplicated only when called through its proxy, not on 'this' from"
                            + " its own class's listener"))
        .toList();
  }

  /**
   * Prepares {@code container} as {@link
   * DedupContainers#configure(AbstractMessageListenerContainer, Duration, Duration, Set)} does,
   * recognising a record without a key header that an {@code @Idempotent} listener found so far
   * also takes as a {@code @Header} argument per listener method, not per container.
   *
   * @throws IllegalStateException the container is running
   */
  public void configure(
      AbstractMessageListenerContainer<?, ?> container,
      Duration initialHoldBackOff,
      Duration maxHoldBackOff) {
    configure(container, initialHoldBackOff, maxHoldBackOff, true);
  }

  /**
   * As {@link #configure(AbstractMessageListenerContainer, Duration, Duration)}; with {@code
   * claimsPerPoll} false the container's consumers are left as they are, and its record listeners
   * claim one record at a time ({@code consumer-dedup.claims-per-poll=false}).
   *
   * @throws IllegalStateException the container is running
   */
  public void configure(
      AbstractMessageListenerContainer<?, ?> container,
      Duration initialHoldBackOff,
      Duration maxHoldBackOff,
      boolean claimsPerPoll) {
    DedupContainers.configure(
        container, initialHoldBackOff, maxHoldBackOff, missingKeyArguments(), claimsPerPoll);
  }

  /**
   * What a record without a key header that an {@code @Idempotent} listener also takes as a {@code
   * Header} argument is turned into.
   */
  private MissingKeyArguments missingKeyArguments() {
    Map<String, Set<String>> listenersByHeader = new HashMap<>();
    for (IdempotentListenerMethod listener : listeners) {
      for (String header : listener.keyHeaderArguments) {
        listenersByHeader.computeIfAbsent(header, h -> new HashSet<>()).add(listener.signature);
      }
    }
    return MissingKeyArguments.forListeners(listenersByHeader);
  }

  @Override
  public Object postProcessAfterInitialization(Object bean, String beanName) {
    Object processed = super.postProcessAfterInitialization(bean, beanName);
    if (processed != bean || AopUtils.isAopProxy(processed)) {
      // Fail at start-up, naming the method, rather than at the first record.
      ReflectionUtils.doWithMethods(
          AopUtils.getTargetClass(processed),
          method -> {
            IdempotentListenerMethod listener =
                IdempotentListenerMethod.of(method, beanName, beanFactory);
            if (listener != null) {
              if (listener.selfCallWarning != null) {
                log.warn(listener.selfCallWarning);
              }
              listeners.add(listener);
            }
          });
      if (processed instanceof Advised advised
          && !advised.isFrozen()
          && advised.indexOf(inside) >= 0
          && advised.indexOf(outside) < 0) {
        advised.addAdvisor(0, outside);
      }
    }
    return processed;
  }
}
