package io.consumerdedup.spring;

import io.consumerdedup.core.DedupKeyMalformedException;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.kafka.KeyExtractor;
import io.consumerdedup.kafka.KeyExtractors;
import io.consumerdedup.kafka.MissingKeyPolicy;
import io.consumerdedup.kafka.internal.RecordKeyResolver;
import io.consumerdedup.kafka.internal.RecordSources;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.AbstractMap;
import java.util.HexFormat;
import java.util.LinkedHashSet;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;
import org.jspecify.annotations.Nullable;
import org.springframework.beans.factory.BeanFactory;
import org.springframework.context.expression.BeanFactoryResolver;
import org.springframework.expression.EvaluationContext;
import org.springframework.expression.EvaluationException;
import org.springframework.expression.Expression;
import org.springframework.expression.spel.support.StandardEvaluationContext;
import org.springframework.kafka.support.KafkaUtils;

/**
 * The key and fingerprint of one record as an {@link Idempotent} listener's annotation derives
 * them: from its header, or by evaluating its key and fingerprint expressions over {@code
 * #payload}, {@code #headers}, {@code #record} and {@code #topic}, in one SpEL context made when
 * first needed. The expressions were checked at start-up ({@link KeyExpressionCheck}); one that
 * fails here fails on this record only.
 */
final class KeyEvaluation {
  private final IdempotentListenerMethod listener;
  private final ConsumerRecord<Object, Object> record;
  private final @Nullable BeanFactory beanFactory;

  /** {@code #payload}: a message's payload, the payload argument, or the record's value. */
  private final @Nullable Object payload;

  private @Nullable EvaluationContext context;

  private KeyEvaluation(
      IdempotentListenerMethod listener,
      ConsumerRecord<Object, Object> record,
      @Nullable Object payload,
      @Nullable BeanFactory beanFactory) {
    this.listener = listener;
    this.record = record;
    this.payload = payload;
    this.beanFactory = beanFactory;
  }

  /** For a call of a record listener with these arguments. */
  static KeyEvaluation ofCall(
      IdempotentListenerMethod listener,
      ConsumerRecord<Object, Object> record,
      @Nullable Object[] arguments,
      @Nullable BeanFactory beanFactory) {
    return new KeyEvaluation(
        listener, record, listener.shape.payload(record, arguments), beanFactory);
  }

  /**
   * For one record of a batch: {@code #payload} is {@code payload} (a message's payload, or the
   * record's value).
   */
  static KeyEvaluation ofBatchRecord(
      IdempotentListenerMethod listener,
      ConsumerRecord<Object, Object> record,
      @Nullable Object payload,
      @Nullable BeanFactory beanFactory) {
    return new KeyEvaluation(listener, record, payload, beanFactory);
  }

  /**
   * For a record of a poll, before the listener call that converts it: {@code #payload} is the
   * record's value (which the caller has checked is of the payload's declared type).
   */
  static KeyEvaluation ofPolledRecord(
      IdempotentListenerMethod listener,
      ConsumerRecord<Object, Object> record,
      @Nullable BeanFactory beanFactory) {
    return new KeyEvaluation(listener, record, record.value(), beanFactory);
  }

  /** Resolves the record's key as the core does: its policy for a missing key, its events. */
  RecordKeyResolver<Object, Object> resolver(
      MissingKeyPolicy missingKeyPolicy, @Nullable String groupId, IdempotentExecutor executor) {
    return new RecordKeyResolver<>(
        listener.bizType, keyExtractor(), missingKeyPolicy, groupId, executor.listener());
  }

  /** How the business key is taken from the record: its header, or the key expression. */
  private KeyExtractor<Object, Object> keyExtractor() {
    if (listener.header != null) {
      return KeyExtractors.header(listener.header);
    }
    Expression expression = Objects.requireNonNull(listener.key);
    return KeyExtractor.named(
        listener.keySource(),
        ignored -> {
          String value = keyText(expression, evaluateValue("key", expression));
          return value == null || value.isEmpty() ? Optional.empty() : Optional.of(value);
        });
  }

  /**
   * The business key a key expression's value stands for. Its {@code toString()} is not always
   * that: bytes and an object without a {@code toString()} of its own print their identity, another
   * key on every delivery, and an empty {@code Optional} prints one key shared by every record
   * without one.
   */
  private @Nullable String keyText(Expression expression, @Nullable Object result) {
    Object value = unwrapped(result);
    if (value == null) {
      return null;
    }
    if (value instanceof byte[] bytes) {
      return KeyExtractors.decodeUtf8(
          bytes, "expression '" + expression.getExpressionString() + "'", record);
    }
    return text("key", expression, value);
  }

  private static @Nullable Object unwrapped(@Nullable Object value) {
    return value instanceof Optional<?> optional ? unwrapped(optional.orElse(null)) : value;
  }

  /** {@code value} as text, refused where its {@code toString()} would differ per delivery. */
  private String text(String what, Expression expression, Object value) {
    Class<?> type = value.getClass();
    if (!(value instanceof CharSequence) && (type.isArray() || declaresNoToString(type))) {
      throw new DedupKeyMalformedException(
          "@Idempotent "
              + what
              + " expression '"
              + expression.getExpressionString()
              + "' of "
              + listener.name
              + " gave a "
              + type.getTypeName()
              + ", whose toString() prints the object's identity rather than its value: another "
              + what
              + " on every delivery. Give it as text, such as a String property of it",
          RecordSources.describe(record, KafkaUtils.getConsumerGroupId()),
          null);
    }
    return value.toString();
  }

  private static boolean declaresNoToString(Class<?> type) {
    try {
      return type.getMethod("toString").getDeclaringClass() == Object.class;
    } catch (NoSuchMethodException e) {
      throw new IllegalStateException("every class has toString()", e);
    }
  }

  /** The SHA-256 of the fingerprint expression's value, or null without one. */
  @Nullable String fingerprint() {
    if (listener.fingerprint == null) {
      return null;
    }
    Object value = unwrapped(evaluateValue("fingerprint", listener.fingerprint));
    if (value == null) {
      return null;
    }
    // Bytes are the payload as it came: their content identifies it, not the array's identity.
    return value instanceof byte[] bytes
        ? sha256(bytes)
        : sha256(text("fingerprint", listener.fingerprint, value).getBytes(StandardCharsets.UTF_8));
  }

  private @Nullable Object evaluateValue(String what, Expression expression) {
    try {
      return expression.getValue(context());
    } catch (RuntimeException e) {
      // The expression is checked at start-up; failing here means this record lacks what it
      // reads, and a redelivery carries the same data: not retryable. SpEL rethrows a
      // RuntimeException of a called method (#payload.substring(20)) as it is, not as an
      // EvaluationException, so both are caught.
      DedupKeyMalformedException malformed =
          new DedupKeyMalformedException(
              "@Idempotent "
                  + what
                  + " expression '"
                  + expression.getExpressionString()
                  + "' of "
                  + listener.name
                  + " failed on this record: "
                  + (e instanceof EvaluationException ? e.getMessage() : e.toString()),
              RecordSources.describe(record, KafkaUtils.getConsumerGroupId()),
              e);
      // Logged once, at ERROR, where the record is given up (the error handler's retry listener).
      throw malformed;
    }
  }

  private EvaluationContext context() {
    if (context == null) {
      StandardEvaluationContext made = new StandardEvaluationContext();
      if (beanFactory != null) {
        made.setBeanResolver(new BeanFactoryResolver(beanFactory));
      }
      made.setVariable(KeyExpressionCheck.RECORD, record);
      made.setVariable(KeyExpressionCheck.TOPIC, record.topic());
      made.setVariable(KeyExpressionCheck.HEADERS, new DecodedHeaders(record));
      made.setVariable(KeyExpressionCheck.PAYLOAD, payload);
      context = made;
    }
    return context;
  }

  private static String sha256(byte[] value) {
    try {
      MessageDigest digest = MessageDigest.getInstance("SHA-256");
      return HexFormat.of().formatHex(digest.digest(value));
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
