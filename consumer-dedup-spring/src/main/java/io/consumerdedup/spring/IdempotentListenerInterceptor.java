package io.consumerdedup.spring;

import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupKeyMalformedException;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.kafka.KeyExtractor;
import io.consumerdedup.kafka.KeyExtractors;
import io.consumerdedup.kafka.MissingKeyPolicy;
import io.consumerdedup.kafka.RecordKeyResolver;
import io.consumerdedup.kafka.RecordSources;
import io.consumerdedup.spring.internal.ListenerOutcomes;
import java.lang.reflect.Method;
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
 * the record being delivered (its header, or the SpEL expression), claims it with the listener's
 * {@link IdempotentExecutor}, invokes the method unless the key already succeeded, and records the
 * outcome. Every decision (claim, duplicate, in progress, conflict, missing key) is the engine's;
 * this class only adapts the method call.
 *
 * <p>The outcome follows the transaction the listener ran in: without one, SUCCESS is written
 * before the method returns to the container, so a SUCCESS that cannot be written keeps the
 * container from acknowledging the record; inside a Spring transaction it is written after the
 * commit (FAILED after a rollback); inside a Kafka transaction of the container, after that
 * transaction, when the container's record interceptor says the record is done ({@link
 * DedupContainers}).
 *
 * <p>The record comes from the method's {@code ConsumerRecord} argument if it has one, else from
 * {@link CurrentRecordInterceptor}, which {@link DedupContainers} adds to every listener container.
 * A duplicate returns {@code null} without invoking the method. The method's own exceptions,
 * checked or not, are rethrown as themselves after FAILED is recorded.
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
    String groupId = KafkaUtils.getConsumerGroupId();
    EvaluationContext[] context = new EvaluationContext[1];
    Function<ConsumerRecord<Object, Object>, EvaluationContext> contextOf =
        r -> {
          if (context[0] == null) {
            context[0] = evaluationContext(listener, r, arguments);
          }
          return context[0];
        };
    RecordKeyResolver<Object, Object> keys =
        new RecordKeyResolver<>(
            listener.bizType,
            keyExtractor(listener, contextOf),
            listener.missingKeyPolicy != null ? listener.missingKeyPolicy : defaultMissingKeyPolicy,
            groupId,
            executor.listener());
    Optional<DedupKey> key = keys.resolve(record);
    if (key.isEmpty()) {
      return invocation.proceed(); // no key, and the policy says to process it without dedup
    }
    String source = keys.source(record);
    if (executor.mode() == DedupMode.TRANSACTIONAL) {
      executors.requireTransaction(listener.toString(), key.get(), source);
    }
    Expression fingerprint = listener.fingerprint;
    String print =
        fingerprint == null
            ? null
            : sha256(evaluate(listener, "fingerprint", fingerprint, contextOf, record));
    DedupClaim claim = executor.claim(key.get(), print, source);
    if (claim.isDuplicate()) {
      return null;
    }
    ListenerOutcomes.Pending pending = ListenerOutcomes.pending(record, claim);
    Object result;
    try {
      result = invocation.proceed();
    } catch (Throwable error) {
      pending.listenerFailed(error);
      settle(listener, record, pending, claim, source);
      throw error;
    }
    pending.listenerSucceeded();
    settle(listener, record, pending, claim, source);
    return result;
  }

  /**
   * Writes the outcome now, or leaves it to the end of the transaction the listener runs in.
   *
   * @throws DedupException SUCCESS could not be written now; the container must not acknowledge the
   *     record (it is retried later and is then a duplicate)
   */
  private static void settle(
      IdempotentListenerMethod listener,
      ConsumerRecord<Object, Object> record,
      ListenerOutcomes.Pending pending,
      DedupClaim claim,
      String source) {
    boolean synchronizing = TransactionSynchronizationManager.isSynchronizationActive();
    if (ListenerOutcomes.inKafkaTransaction()) {
      if (!CurrentRecordInterceptor.isCurrent(record)) {
        pending.rolledBack(new IllegalStateException("no container support"));
        pending.settle();
        throw new DedupConfigurationException(
            "Listener "
                + listener
                + " runs in a Kafka transaction, but its container does not run consumer-dedup's"
                + " record interceptor, so SUCCESS could only be written before that transaction"
                + " commits: configure the container with DedupContainers.configure(container)",
            claim.key(),
            source);
      }
      if (synchronizing) {
        ListenerOutcomes.afterTransaction(pending, false); // notes a rollback of the inner one
      }
      ListenerOutcomes.deferToContainer(pending);
    } else if (synchronizing) {
      ListenerOutcomes.afterTransaction(pending, true);
    } else {
      pending.settle();
    }
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
                            + " DedupContainers.configure(container)), or it was called outside"
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
