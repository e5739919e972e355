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
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.Set;
import java.util.regex.Pattern;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;
import org.jspecify.annotations.Nullable;
import org.springframework.beans.factory.BeanFactory;
import org.springframework.context.expression.BeanFactoryResolver;
import org.springframework.expression.AccessException;
import org.springframework.expression.EvaluationContext;
import org.springframework.expression.EvaluationException;
import org.springframework.expression.Expression;
import org.springframework.expression.PropertyAccessor;
import org.springframework.expression.TypedValue;
import org.springframework.expression.spel.SpelNode;
import org.springframework.expression.spel.ast.StringLiteral;
import org.springframework.expression.spel.standard.SpelExpression;
import org.springframework.expression.spel.support.ReflectivePropertyAccessor;
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

  private @Nullable KeyContext context;

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
    return new KeyExtractor<>() {
      @Override
      public Optional<String> extract(ConsumerRecord<Object, Object> ignored) {
        String value = keyText(expression, evaluateValue("key", expression));
        return value == null || value.isEmpty() || madeOfAbsentPart(value)
            ? Optional.empty()
            : Optional.of(value);
      }

      @Override
      public String description() {
        List<String> absent = absentReads();
        return absent.isEmpty()
            ? listener.keySource()
            : String.join(", ", absent) + " of " + listener.keySource();
      }
    };
  }

  /**
   * Whether a header or property the record lacks went into {@code key} as the text "null": SpEL
   * renders null so in a concatenation ({@code #headers['tenant'] + ':' + #headers['order-no']}),
   * and every record lacking that part would share one key, the first applied and the rest skipped
   * as its duplicates. Only a part of the key that is exactly "null", between the separators the
   * expression itself writes (its string literals, such as {@code ':'}), counts: a value that
   * merely contains the text ({@code acme:nullable-7}), and a read an expression falls back from
   * ({@code #headers['a'] ?: #headers['b']}) or only tests, are a valid key. Parts joined without a
   * literal between them ({@code #headers['a'] + #headers['b']}, a list's text, {@code
   * T(String).format}) cannot be told apart, and are not recognised; nor is a part next to a
   * literal that is itself part of the word ({@code ?: 'null'}), which the split takes apart.
   */
  private boolean madeOfAbsentPart(String key) {
    if (absentReads().isEmpty() || !key.contains("null")) {
      return false;
    }
    List<String> parts = List.of(key);
    for (String separator : stringLiterals(Objects.requireNonNull(listener.key))) {
      List<String> split = new ArrayList<>();
      for (String part : parts) {
        split.addAll(Arrays.asList(part.split(Pattern.quote(separator), -1)));
      }
      parts = split;
    }
    return parts.contains("null");
  }

  /** The string literals of {@code expression}, such as {@code ':'} and {@code 'tenant'}. */
  private static Set<String> stringLiterals(Expression expression) {
    Set<String> literals = new LinkedHashSet<>();
    if (expression instanceof SpelExpression spel) {
      addStringLiterals(spel.getAST(), literals);
    }
    return literals;
  }

  private static void addStringLiterals(SpelNode node, Set<String> literals) {
    if (node instanceof StringLiteral literal
        && literal.getLiteralValue().getValue() instanceof String text
        && !text.isEmpty()) {
      literals.add(text);
    }
    for (int i = 0; i < node.getChildCount(); i++) {
      addStringLiterals(node.getChild(i), literals);
    }
  }

  private List<String> absentReads() {
    return context == null ? List.of() : context.absentReads;
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
    if (context != null) {
      // The reads of this expression only: the key's are not the fingerprint's.
      context.absentReads.clear();
    }
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
      KeyContext made = new KeyContext();
      if (beanFactory != null) {
        made.setBeanResolver(new BeanFactoryResolver(beanFactory));
      }
      made.setPropertyAccessors(List.of(NOTING_ACCESSOR));
      made.setVariable(KeyExpressionCheck.RECORD, record);
      made.setVariable(KeyExpressionCheck.TOPIC, record.topic());
      made.setVariable(KeyExpressionCheck.HEADERS, new DecodedHeaders(record, made.absentReads));
      made.setVariable(KeyExpressionCheck.PAYLOAD, payload);
      context = made;
    }
    return context;
  }

  /** One record's evaluation context, with the reads of what the record lacks. */
  private static final class KeyContext extends StandardEvaluationContext {
    /** Such as {@code header 'order-no'}: what read null while evaluating, in order. */
    final List<String> absentReads = new ArrayList<>(1);
  }

  private static final PropertyAccessor NOTING_ACCESSOR = new AbsentNotingPropertyAccessor();

  /**
   * SpEL's reflective reading of properties, and a Map's entries read as properties where it has no
   * getter of that name ({@code #payload.orderNo} of a JSON object converted to a Map, rather than
   * failing on every record); a property that reads null is noted in the {@link KeyContext}. It
   * delegates rather than extends {@link ReflectivePropertyAccessor}: SpEL replaces a reflective
   * accessor with an optimized one of its own, which would read without noting.
   */
  private static final class AbsentNotingPropertyAccessor implements PropertyAccessor {
    private final ReflectivePropertyAccessor reflective = new ReflectivePropertyAccessor(false);

    @Override
    public Class<?> @Nullable [] getSpecificTargetClasses() {
      return null;
    }

    @Override
    public boolean canRead(EvaluationContext context, @Nullable Object target, String name)
        throws AccessException {
      return reflective.canRead(context, target, name) || target instanceof Map<?, ?>;
    }

    @Override
    public TypedValue read(EvaluationContext context, @Nullable Object target, String name)
        throws AccessException {
      // A getter first, as before Map entries were read: a payload class extending HashMap with
      // getters, or #payload.empty, keeps the key it had (and its dedup rows keep matching).
      TypedValue value =
          target instanceof Map<?, ?> map && !reflective.canRead(context, target, name)
              ? new TypedValue(map.get(name))
              : reflective.read(context, target, name);
      if (value.getValue() == null && context instanceof KeyContext keyContext) {
        keyContext.absentReads.add(
            "property '"
                + name
                + "'"
                + (target == null ? "" : " of " + target.getClass().getSimpleName()));
      }
      return value;
    }

    @Override
    public boolean canWrite(EvaluationContext context, @Nullable Object target, String name) {
      return false;
    }

    @Override
    public void write(
        EvaluationContext context, @Nullable Object target, String name, @Nullable Object value)
        throws AccessException {
      throw new AccessException("key expressions do not write properties");
    }
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
    private final List<String> absentReads;

    DecodedHeaders(ConsumerRecord<Object, Object> record, List<String> absentReads) {
      this.record = record;
      this.absentReads = absentReads;
    }

    @Override
    public @Nullable String get(@Nullable Object name) {
      if (!(name instanceof String header) || header.isBlank()) {
        return null;
      }
      String value = KeyExtractors.<Object, Object>header(header).extract(record).orElse(null);
      if (value == null) {
        absentReads.add("header '" + header + "'");
      }
      return value;
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
