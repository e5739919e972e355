package io.consumerdedup.test.spring;

import io.consumerdedup.spring.Idempotent;
import io.consumerdedup.spring.IdempotentListenerPostProcessor;
import io.consumerdedup.spring.internal.CurrentRecordInterceptor;
import io.consumerdedup.spring.internal.ListenerOutcomes;
import io.consumerdedup.test.RedeliveredCopies;
import io.consumerdedup.test.RedeliveryReport;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Supplier;
import org.aopalliance.intercept.MethodInterceptor;
import org.aopalliance.intercept.MethodInvocation;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.jspecify.annotations.Nullable;
import org.springframework.aop.Advisor;
import org.springframework.aop.ProxyMethodInvocation;
import org.springframework.aop.framework.Advised;
import org.springframework.aop.framework.ProxyFactory;
import org.springframework.aop.support.AopUtils;
import org.springframework.aop.support.DefaultPointcutAdvisor;
import org.springframework.aop.support.annotation.AnnotationMatchingPointcut;
import org.springframework.beans.factory.config.BeanPostProcessor;
import org.springframework.core.Ordered;
import org.springframework.core.annotation.AnnotatedElementUtils;
import org.springframework.messaging.Message;
import org.springframework.messaging.support.MessageBuilder;
import org.springframework.transaction.support.TransactionSynchronizationManager;
import org.springframework.util.ReflectionUtils;

/**
 * Adds two advisors to the proxy of each bean with {@link Idempotent} methods, around the dedup
 * advice that {@link IdempotentListenerPostProcessor} put there (this post-processor runs after
 * it):
 *
 * <ul>
 *   <li>outermost, before the dedup advice and any transaction advice: invokes the listener method
 *       a second time, with the same arguments, after the first call returned (its outcome written,
 *       its transaction committed); records, byte arrays and messages of bytes (a batch's too) are
 *       new objects with the content they had before the first call, as a real redelivery
 *       deserializes them;
 *   <li>innermost, next to the method itself and inside the dedup advice: counts each run of the
 *       method's body for the record being delivered.
 * </ul>
 *
 * <p>A bean that has no proxy (consumer-dedup turned off) gets one with just these two advisors, so
 * the report shows what an unprotected listener does with a redelivered record.
 */
public class RedeliveringListenerPostProcessor implements BeanPostProcessor, Ordered {

  private static final String CONTAINER_TRANSACTION =
      " (delivered inside the transaction its container runs the listener in, whose commit writes"
          + " the first delivery's outcome only after the listener returned: redelivery testing"
          + " does not support a listener whose container runs it in a transaction, a database"
          + " one or Kafka's)";

  private final Advisor redeliver;
  private final Advisor countBodyRuns;

  public RedeliveringListenerPostProcessor(Supplier<RedeliveryReport> report) {
    Objects.requireNonNull(report, "report");
    this.redeliver = advisor(redeliverAdvice(report));
    this.countBodyRuns = advisor(countingAdvice(report));
  }

  private static Advisor advisor(MethodInterceptor advice) {
    return new DefaultPointcutAdvisor(
        new AnnotationMatchingPointcut(null, Idempotent.class, true), advice);
  }

  private static MethodInterceptor redeliverAdvice(Supplier<RedeliveryReport> report) {
    return invocation -> {
      if (!(invocation instanceof ProxyMethodInvocation proxied)) {
        return invocation.proceed();
      }
      // Cloned before the first call moves the invocation along its chain of advice, and before
      // the listener can change the arrays it is handed, which a real redelivery deserializes anew.
      MethodInvocation copy = proxied.invocableClone(redelivered(invocation.getArguments()));
      // Outside the listener's own @Transactional advice, a transaction can only be its
      // container's, which commits (and has the first delivery's outcome written) after the
      // listener returns: the copy meets the key still in progress, so its failure says why.
      String description =
          TransactionSynchronizationManager.isActualTransactionActive()
                  || ListenerOutcomes.inKafkaTransaction()
              ? describe(invocation) + CONTAINER_TRANSACTION
              : describe(invocation);
      ConsumerRecord<?, ?> record = recordOf(invocation);
      return report
          .get()
          .deliverTwice(
              invocation::proceed,
              copy::proceed,
              description,
              record == null
                  ? listenerName(invocation.getMethod()) + "'s record"
                  : record.topic() + "-" + record.partition() + "@" + record.offset());
    };
  }

  /**
   * The arguments of a redelivered copy: records, byte arrays and messages of bytes (alone, or in a
   * batch's list) as Kafka delivers them again, new objects with the first delivery's content.
   * Other payload objects are the first delivery's own.
   */
  private static Object[] redelivered(@Nullable Object[] arguments) {
    Object[] copies = arguments.clone();
    for (int i = 0; i < copies.length; i++) {
      if (copies[i] instanceof List<?> batch) {
        List<@Nullable Object> elements = new ArrayList<>(batch.size());
        batch.forEach(element -> elements.add(redelivered(element)));
        if (!elements.equals(batch)) {
          copies[i] = elements;
        }
      } else {
        copies[i] = redelivered(copies[i]);
      }
    }
    return copies;
  }

  private static @Nullable Object redelivered(@Nullable Object argument) {
    if (argument instanceof ConsumerRecord<?, ?> record) {
      return RedeliveredCopies.of(record);
    }
    if (argument instanceof byte[] bytes) {
      return bytes.clone();
    }
    if (argument instanceof Message<?> message && message.getPayload() instanceof byte[] bytes) {
      return MessageBuilder.createMessage(bytes.clone(), message.getHeaders());
    }
    return argument;
  }

  private static MethodInterceptor countingAdvice(Supplier<RedeliveryReport> report) {
    return invocation -> {
      String listener = listenerName(invocation.getMethod());
      List<ConsumerRecord<?, ?>> counted = batchOf(invocation);
      if (counted == null) {
        ConsumerRecord<?, ?> record = recordOf(invocation);
        counted = record == null ? List.of() : List.of(record);
      }
      RedeliveryReport runs = report.get();
      counted.forEach(record -> runs.bodyRan(listener, record));
      try {
        return invocation.proceed();
      } catch (Throwable e) {
        // The container's retry of a failed record runs the body again: a retry, not a second
        // application of its effect.
        counted.forEach(record -> runs.bodyFailed(listener, record, e));
        throw e;
      }
    };
  }

  /**
   * The records a batch listener's body is handed (after the dedup took out the duplicates), when
   * it takes them as {@code ConsumerRecord}s; null for a listener of one record, or of a batch of
   * payloads, which cannot be told apart by record.
   */
  private static @Nullable List<ConsumerRecord<?, ?>> batchOf(MethodInvocation invocation) {
    for (Object argument : invocation.getArguments()) {
      if (argument instanceof ConsumerRecord<?, ?>) {
        return null;
      }
    }
    for (Object argument : invocation.getArguments()) {
      if (argument instanceof ConsumerRecords<?, ?> records) {
        List<ConsumerRecord<?, ?>> all = new ArrayList<>();
        records.forEach(all::add);
        return all;
      }
      if (argument instanceof List<?> list
          && !list.isEmpty()
          && list.stream().allMatch(element -> element instanceof ConsumerRecord<?, ?>)) {
        List<ConsumerRecord<?, ?>> all = new ArrayList<>();
        list.forEach(element -> all.add((ConsumerRecord<?, ?>) element));
        return all;
      }
    }
    return null;
  }

  private static @Nullable ConsumerRecord<?, ?> recordOf(MethodInvocation invocation) {
    for (Object argument : invocation.getArguments()) {
      if (argument instanceof ConsumerRecord<?, ?> record) {
        return record;
      }
    }
    return CurrentRecordInterceptor.current().orElse(null);
  }

  private static String describe(MethodInvocation invocation) {
    ConsumerRecord<?, ?> record = recordOf(invocation);
    return listenerName(invocation.getMethod())
        + " on the copy of "
        + (record == null
            ? "its record"
            : record.topic() + "-" + record.partition() + "@" + record.offset());
  }

  /** {@code Class.method}, as the report names a listener. */
  static String listenerName(Method method) {
    return method.getDeclaringClass().getSimpleName() + "." + method.getName();
  }

  @Override
  public Object postProcessAfterInitialization(Object bean, String beanName) {
    if (!hasIdempotentMethods(AopUtils.getTargetClass(bean))) {
      return bean;
    }
    if (bean instanceof Advised advised) {
      if (!advised.isFrozen() && advised.indexOf(redeliver) < 0) {
        advised.addAdvisor(0, redeliver);
        advised.addAdvisor(countBodyRuns);
      }
      return bean;
    }
    // No dedup advice (consumer-dedup.enabled=false): the listener runs unprotected, and the
    // report shows what that does to a redelivered record.
    ProxyFactory proxy = new ProxyFactory(bean);
    proxy.setProxyTargetClass(true);
    proxy.addAdvisor(redeliver);
    proxy.addAdvisor(countBodyRuns);
    return proxy.getProxy(AopUtils.getTargetClass(bean).getClassLoader());
  }

  private static boolean hasIdempotentMethods(Class<?> type) {
    AtomicBoolean found = new AtomicBoolean();
    ReflectionUtils.doWithMethods(
        type,
        method -> found.set(true),
        method -> AnnotatedElementUtils.hasAnnotation(method, Idempotent.class));
    return found.get();
  }

  /** After {@link IdempotentListenerPostProcessor}, whose advisors this one surrounds. */
  @Override
  public int getOrder() {
    return Ordered.LOWEST_PRECEDENCE - 50;
  }
}
