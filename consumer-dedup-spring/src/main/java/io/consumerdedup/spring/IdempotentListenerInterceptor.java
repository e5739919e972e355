package io.consumerdedup.spring;

import io.consumerdedup.core.DedupHandlerException;
import io.consumerdedup.core.DedupKeyMalformedException;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.kafka.IdempotentRecordHandler;
import io.consumerdedup.kafka.KeyExtractor;
import io.consumerdedup.kafka.KeyExtractors;
import io.consumerdedup.kafka.MissingKeyPolicy;
import io.consumerdedup.kafka.RecordSources;
import java.lang.reflect.Method;
import java.lang.reflect.UndeclaredThrowableException;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.AbstractMap;
import java.util.LinkedHashSet;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Function;
import org.aopalliance.intercept.MethodInterceptor;
import org.aopalliance.intercept.MethodInvocation;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;
import org.jspecify.annotations.Nullable;
import org.springframework.aop.support.AopUtils;
import org.springframework.beans.factory.BeanFactory;
import org.springframework.context.expression.BeanFactoryResolver;
import org.springframework.expression.EvaluationContext;
import org.springframework.expression.EvaluationException;
import org.springframework.expression.Expression;
import org.springframework.expression.spel.support.StandardEvaluationContext;
import org.springframework.kafka.support.KafkaUtils;
import org.springframework.messaging.Message;
import org.springframework.transaction.support.TransactionSynchronizationManager;

/**
 * Runs {@link Idempotent} listener methods through the core engine: derives the business key from
 * the record being delivered (its header, or the SpEL expression), and hands the method invocation
 * to an {@link IdempotentRecordHandler} over the listener's {@link IdempotentExecutor}. Every
 * decision (claim, duplicate, in progress, conflict, missing key) is the engine's; this class only
 * adapts the method call.
 *
 * <p>The record comes from the method's {@code ConsumerRecord} argument if it has one, else from
 * {@link CurrentRecordInterceptor}, which the auto-configuration adds to every listener container
 * factory. A duplicate returns {@code null} without invoking the method. Exceptions are the
 * engine's: see {@link IdempotentExecutor#execute}; a checked exception of the method is rethrown
 * as itself.
 */
public final class IdempotentListenerInterceptor implements MethodInterceptor {

  private final IdempotentExecutors executors;
  private final MissingKeyPolicy defaultMissingKeyPolicy;
  private final @Nullable BeanFactory beanFactory;
  private final Map<Method, Optional<IdempotentListenerMethod>> methods = new ConcurrentHashMap<>();

  /**
   * @param beanFactory resolves {@code @bean} references in key expressions; may be null
   */
  public IdempotentListenerInterceptor(
      IdempotentExecutors executors,
      MissingKeyPolicy defaultMissingKeyPolicy,
      @Nullable BeanFactory beanFactory) {
    this.executors = Objects.requireNonNull(executors, "executors");
    this.defaultMissingKeyPolicy =
        Objects.requireNonNull(defaultMissingKeyPolicy, "defaultMissingKeyPolicy");
    this.beanFactory = beanFactory;
  }

  @Override
  public @Nullable Object invoke(MethodInvocation invocation) throws Throwable {
    IdempotentListenerMethod listener = listenerOf(invocation).orElse(null);
    if (listener == null) {
      return invocation.proceed();
    }
    Object[] arguments = invocation.getArguments();
    ConsumerRecord<Object, Object> record = recordOf(listener, arguments);
    IdempotentExecutor executor = executors.executor(listener.overrides);
    if (executor.mode() == DedupMode.TRANSACTIONAL
        && !TransactionSynchronizationManager.isActualTransactionActive()) {
      throw new IllegalStateException(
          "Listener "
              + listener
              + " uses consumer-dedup mode TRANSACTIONAL but runs outside a Spring transaction:"
              + " give its container a DataSourceTransactionManager on the dedup table's"
              + " DataSource, or annotate it @Transactional (record "
              + RecordSources.describe(record, KafkaUtils.getConsumerGroupId())
              + ")");
    }
    EvaluationContext[] context = new EvaluationContext[1];
    Function<ConsumerRecord<Object, Object>, EvaluationContext> contextOf =
        r -> {
          if (context[0] == null) {
            context[0] = evaluationContext(listener, r, arguments);
          }
          return context[0];
        };
    IdempotentRecordHandler.Builder<Object, Object> handler =
        IdempotentRecordHandler.<Object, Object>builder(executor)
            .bizType(listener.bizType)
            .key(keyExtractor(listener, contextOf))
            .missingKeyPolicy(
                listener.missingKeyPolicy != null
                    ? listener.missingKeyPolicy
                    : defaultMissingKeyPolicy);
    Expression fingerprint = listener.fingerprint;
    if (fingerprint != null) {
      handler.fingerprint(
          r -> sha256(evaluate(listener, "fingerprint", fingerprint, contextOf, r)));
    }
    String groupId = KafkaUtils.getConsumerGroupId();
    if (groupId != null) {
      handler.groupId(groupId);
    }
    AtomicReference<@Nullable Object> result = new AtomicReference<>();
    try {
      handler.handler(r -> result.set(proceed(invocation))).build().handle(record);
    } catch (DedupHandlerException e) {
      // The method threw a checked exception: the record is FAILED; rethrow it as itself.
      throw e.getCause() != null ? e.getCause() : e;
    }
    return result.get();
  }

  private Optional<IdempotentListenerMethod> listenerOf(MethodInvocation invocation) {
    Method method = invocation.getMethod();
    Object target = invocation.getThis();
    Method specific =
        target != null
            ? AopUtils.getMostSpecificMethod(method, AopUtils.getTargetClass(target))
            : method;
    return methods.computeIfAbsent(
        specific, m -> Optional.ofNullable(IdempotentListenerMethod.of(m)));
  }

  @SuppressWarnings("unchecked")
  private static ConsumerRecord<Object, Object> recordOf(
      IdempotentListenerMethod listener, @Nullable Object[] arguments) {
    if (listener.recordIndex >= 0 && arguments[listener.recordIndex] != null) {
      return (ConsumerRecord<Object, Object>) arguments[listener.recordIndex];
    }
    return (ConsumerRecord<Object, Object>)
        CurrentRecordInterceptor.current()
            .orElseThrow(
                () ->
                    new IllegalStateException(
                        "@Idempotent listener "
                            + listener
                            + " was called without a record: it takes no ConsumerRecord argument"
                            + " and its container does not run CurrentRecordInterceptor (the"
                            + " auto-configuration adds it to listener container factory beans;"
                            + " for a factory or container made by hand call"
                            + " CurrentRecordInterceptor.addTo(...)), or it was called outside"
                            + " a Kafka listener container, or on a batch listener"));
  }

  private KeyExtractor<Object, Object> keyExtractor(
      IdempotentListenerMethod listener,
      Function<ConsumerRecord<Object, Object>, EvaluationContext> contextOf) {
    String header = listener.header;
    if (header != null) {
      return KeyExtractors.header(header);
    }
    Expression key = Objects.requireNonNull(listener.key);
    return record -> {
      String value = evaluate(listener, "key", key, contextOf, record);
      return value == null || value.isEmpty() ? Optional.empty() : Optional.of(value);
    };
  }

  private static @Nullable String evaluate(
      IdempotentListenerMethod listener,
      String what,
      Expression expression,
      Function<ConsumerRecord<Object, Object>, EvaluationContext> contextOf,
      ConsumerRecord<Object, Object> record) {
    Object value;
    try {
      value = expression.getValue(contextOf.apply(record));
    } catch (EvaluationException e) {
      // The expression is checked at start-up; failing here means this record lacks what it reads,
      // and a redelivery carries the same data: not retryable.
      throw new DedupKeyMalformedException(
          "@Idempotent "
              + what
              + " expression '"
              + expression.getExpressionString()
              + "' of "
              + listener
              + " failed on this record: "
              + e.getMessage(),
          RecordSources.describe(record, KafkaUtils.getConsumerGroupId()),
          e);
    }
    return value == null ? null : value.toString();
  }

  private EvaluationContext evaluationContext(
      IdempotentListenerMethod listener,
      ConsumerRecord<Object, Object> record,
      @Nullable Object[] arguments) {
    StandardEvaluationContext context = new StandardEvaluationContext();
    if (beanFactory != null) {
      context.setBeanResolver(new BeanFactoryResolver(beanFactory));
    }
    context.setVariable("record", record);
    context.setVariable("topic", record.topic());
    context.setVariable("headers", new DecodedHeaders(record));
    context.setVariable("payload", payloadOf(listener, record, arguments));
    return context;
  }

  private static @Nullable Object payloadOf(
      IdempotentListenerMethod listener,
      ConsumerRecord<Object, Object> record,
      @Nullable Object[] arguments) {
    if (listener.messageIndex >= 0 && arguments[listener.messageIndex] instanceof Message<?> m) {
      return m.getPayload();
    }
    if (listener.payloadIndex >= 0) {
      return arguments[listener.payloadIndex];
    }
    return record.value();
  }

  private static @Nullable Object proceed(MethodInvocation invocation) throws Exception {
    try {
      return invocation.proceed();
    } catch (Exception | Error e) {
      throw e;
    } catch (Throwable t) {
      throw new UndeclaredThrowableException(t);
    }
  }

  private static @Nullable String sha256(@Nullable String value) {
    if (value == null) {
      return null;
    }
    try {
      MessageDigest digest = MessageDigest.getInstance("SHA-256");
      return java.util.HexFormat.of()
          .formatHex(digest.digest(value.getBytes(StandardCharsets.UTF_8)));
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("SHA-256 is required of every Java platform", e);
    }
  }

  /**
   * {@code #headers}: header name to the value of its last occurrence, decoded strictly as UTF-8 by
   * the core's {@link KeyExtractors#header(String)} when read (a header that is not UTF-8 fails
   * only if the expression reads it).
   */
  private static final class DecodedHeaders extends AbstractMap<String, @Nullable String> {
    private final ConsumerRecord<Object, Object> record;

    DecodedHeaders(ConsumerRecord<Object, Object> record) {
      this.record = record;
    }

    @Override
    public @Nullable String get(@Nullable Object name) {
      if (!(name instanceof String header) || header.isBlank()) {
        return null;
      }
      return KeyExtractors.<Object, Object>header(header).extract(record).orElse(null);
    }

    @Override
    public boolean containsKey(@Nullable Object name) {
      return name instanceof String header && record.headers().lastHeader(header) != null;
    }

    @Override
    public Set<Map.Entry<String, @Nullable String>> entrySet() {
      Set<String> names = new LinkedHashSet<>();
      for (Header header : record.headers()) {
        names.add(header.key());
      }
      Set<Map.Entry<String, @Nullable String>> entries = new LinkedHashSet<>();
      for (String name : names) {
        entries.add(new SimpleImmutableEntry<>(name, get(name)));
      }
      return entries;
    }
  }
}
