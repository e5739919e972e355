package io.consumerdedup.spring;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupKeyMalformedException;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.InProgressPolicy;
import io.consumerdedup.kafka.KeyExtractor;
import io.consumerdedup.kafka.KeyExtractors;
import io.consumerdedup.kafka.MissingKeyPolicy;
import io.consumerdedup.kafka.internal.RecordSources;
import io.consumerdedup.spring.internal.CurrentRecordInterceptor;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.lang.reflect.ParameterizedType;
import java.lang.reflect.Type;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Duration;
import java.util.AbstractMap;
import java.util.Collection;
import java.util.HexFormat;
import java.util.LinkedHashSet;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.common.header.Header;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.beans.factory.BeanFactory;
import org.springframework.boot.convert.DurationStyle;
import org.springframework.context.expression.BeanFactoryResolver;
import org.springframework.core.MethodParameter;
import org.springframework.core.ResolvableType;
import org.springframework.core.annotation.AnnotatedElementUtils;
import org.springframework.core.annotation.AnnotatedMethod;
import org.springframework.expression.EvaluationContext;
import org.springframework.expression.EvaluationException;
import org.springframework.expression.Expression;
import org.springframework.expression.ParseException;
import org.springframework.expression.spel.standard.SpelExpressionParser;
import org.springframework.expression.spel.support.StandardEvaluationContext;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.listener.adapter.ConsumerRecordMetadata;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.kafka.support.KafkaUtils;
import org.springframework.messaging.Message;
import org.springframework.messaging.MessageHeaders;
import org.springframework.messaging.handler.annotation.Headers;
import org.springframework.messaging.handler.annotation.Payload;
import org.springframework.messaging.handler.annotation.SendTo;
import org.springframework.messaging.support.MessageHeaderAccessor;
import org.springframework.util.ClassUtils;

/**
 * One {@link Idempotent} listener method: its annotation parsed and its signature read once, at
 * start-up ({@link IdempotentListenerPostProcessor}), so that a mistake, or a listener shape that
 * consumer-dedup cannot protect, fails the application with what to do instead, not a record. At
 * run time it derives a call's key and fingerprint (header or SpEL) and what a duplicate returns.
 */
final class IdempotentListenerMethod {
  private static final Logger log = LoggerFactory.getLogger(IdempotentListenerMethod.class);
  private static final SpelExpressionParser PARSER = new SpelExpressionParser();
  private static final boolean REACTOR_PRESENT =
      ClassUtils.isPresent(
          "reactor.core.publisher.Mono", IdempotentListenerMethod.class.getClassLoader());
  private static final String KOTLIN_CONTINUATION = "kotlin.coroutines.Continuation";
  private static final String TAKE_RECORDS =
      "Take List<ConsumerRecord<K, V>> or List<Message<?>> and read payloads and headers from each"
          + " element";

  /** What the method returns, which decides when its outcome is known. */
  enum Returns {
    /** A value or nothing: the outcome is known when the method returns. */
    VALUE,
    /** A {@code CompletableFuture} or {@code CompletionStage}: known when it completes. */
    FUTURE,
    /** A Reactor {@code Mono}: known when it completes. */
    MONO
  }

  final String name;

  /** The bean whose method it is, if known; named in refusals. */
  private final @Nullable String beanName;

  final String bizType;
  final @Nullable String header;
  final @Nullable Expression key;
  final @Nullable Expression fingerprint;
  final @Nullable MissingKeyPolicy missingKeyPolicy;
  final IdempotentExecutors.Overrides overrides;
  final Returns returns;

  /** What a duplicate returns: null, a primitive's zero, or an empty future or Mono. */
  private final Class<?> returnType;

  /** Index of the argument that is the record, or -1. */
  final int recordIndex;

  /** Index of the argument that is a {@code Message<?>}, or -1. */
  private final int messageIndex;

  /** Index of the argument that is the converted payload, or -1 (then the record value). */
  private final int payloadIndex;

  /** Index of the {@code Acknowledgment} argument, or -1. */
  final int ackIndex;

  /** The method as spring-kafka names it when it cannot be called ({@code toGenericString}). */
  final String signature;

  /** See {@link KeyHeaderArguments}. */
  final Set<String> keyHeaderArguments;

  /** The {@code @KafkaListener} id, if the method or its class gives one. */
  final String listenerId;

  /** The {@code @KafkaListener} of the method, else of its class; null if neither has one. */
  final @Nullable KafkaListener kafkaListener;

  /** How a batch listener takes its records; null for a record listener. */
  final @Nullable BatchShape batch;

  /** Index of the argument that holds the batch, or -1. */
  final int batchIndex;

  /** How a batch listener takes its batch: the only forms whose records can be filtered. */
  enum BatchShape {
    /** {@code List<ConsumerRecord<K, V>>}. */
    RECORDS,
    /** {@code List<Message<?>>}, one message per record, in the container's order. */
    MESSAGES,
    /** {@code ConsumerRecords<K, V>}. */
    CONSUMER_RECORDS
  }

  private IdempotentListenerMethod(
      Method method, Idempotent annotation, @Nullable String beanName) {
    this.name = method.getDeclaringClass().getName() + "#" + method.getName();
    this.beanName = beanName;
    this.signature = method.toGenericString();
    refuseUnprotectable(method);
    this.bizType = annotation.bizType();
    try {
      DedupKey.of(bizType, "check");
    } catch (IllegalArgumentException e) {
      throw invalid(
          String.valueOf(e.getMessage()),
          "Name the kind of action the listener performs: bizType = \"payment\"",
          e);
    }
    boolean hasHeader = !annotation.header().isBlank();
    boolean hasKey = !annotation.key().isBlank();
    if (hasHeader == hasKey) {
      throw invalid(
          hasHeader ? "it gives both header and key" : "it gives neither header nor key",
          "Give exactly one of header and key: header = \"order-no\" takes the key from that"
              + " header, key = \"#payload.orderNo\" from a SpEL expression",
          null);
    }
    this.header = hasHeader ? annotation.header() : null;
    this.key = hasKey ? parse("key", annotation.key()) : null;
    this.fingerprint =
        annotation.fingerprint().isBlank() ? null : parse("fingerprint", annotation.fingerprint());
    this.missingKeyPolicy = single("missingKeyPolicy", annotation.missingKeyPolicy());
    InProgressPolicy inProgress = single("inProgressPolicy", annotation.inProgressPolicy());
    DedupMode mode = single("mode", annotation.mode());
    Duration lease = null;
    if (!annotation.lease().isBlank()) {
      String leaseAction =
          "Write a positive duration such as lease = \"30s\" or \"10m\", or leave it out for"
              + " consumer-dedup.lease";
      try {
        lease = DurationStyle.detectAndParse(annotation.lease());
      } catch (IllegalArgumentException e) {
        throw invalid("lease '" + annotation.lease() + "' is not a duration", leaseAction, e);
      }
      if (lease.isNegative() || lease.isZero()) {
        throw invalid("lease must be positive, was " + annotation.lease(), leaseAction, null);
      }
    }
    this.overrides = new IdempotentExecutors.Overrides(lease, inProgress, mode);
    this.returnType = method.getReturnType();
    this.returns = returnsOf(returnType);

    // As spring-messaging resolves the arguments: parameter annotations of interfaces count too,
    // and the payload is the @Payload parameter, else the first one no other resolver claims.
    int record = -1;
    int message = -1;
    int ack = -1;
    int annotatedPayload = -1;
    int unclaimed = -1;
    for (MethodParameter parameter : new AnnotatedMethod(method).getMethodParameters()) {
      int i = parameter.getParameterIndex();
      Class<?> type = parameter.getParameterType();
      if (ConsumerRecord.class.isAssignableFrom(type)) {
        record = record < 0 ? i : record;
      } else if (Message.class.isAssignableFrom(type)) {
        message = message < 0 ? i : message;
      } else if (Acknowledgment.class.isAssignableFrom(type)) {
        ack = ack < 0 ? i : ack;
      } else if (parameter.hasParameterAnnotation(Payload.class)) {
        annotatedPayload = annotatedPayload < 0 ? i : annotatedPayload;
      } else if (unclaimed < 0 && !claimedByAnotherResolver(parameter)) {
        unclaimed = i;
      }
    }
    this.recordIndex = record;
    this.messageIndex = message;
    this.ackIndex = ack;
    this.payloadIndex = annotatedPayload >= 0 ? annotatedPayload : unclaimed;
    this.keyHeaderArguments = KeyHeaderArguments.of(method, header, key);
    KafkaListener listener =
        AnnotatedElementUtils.findMergedAnnotation(method, KafkaListener.class);
    if (listener == null) {
      listener =
          AnnotatedElementUtils.findMergedAnnotation(
              method.getDeclaringClass(), KafkaListener.class);
    }
    this.kafkaListener = listener;
    this.listenerId = listener == null ? "" : listener.id();
    if (isBatch(method)) {
      int index = -1;
      BatchShape shape = null;
      for (MethodParameter parameter : new AnnotatedMethod(method).getMethodParameters()) {
        BatchShape found = batchShapeOf(parameter.getGenericParameterType());
        Class<?> type = parameter.getParameterType();
        if (found != null && shape == null) {
          shape = found;
          index = parameter.getParameterIndex();
        } else if (!Acknowledgment.class.isAssignableFrom(type)
            && !Consumer.class.isAssignableFrom(type)) {
          throw invalid(
              "a batch listener can take only its records, as List<ConsumerRecord<K, V>>,"
                  + " List<Message<?>> or ConsumerRecords<K, V>, an Acknowledgment and the"
                  + " Consumer: "
                  + (found == null
                      ? "its parameter "
                          + parameter.getGenericParameterType().getTypeName()
                          + " (a list of payloads or of @Header values)"
                      : "a second batch parameter")
                  + " spans the whole batch and cannot be filtered together with the records"
                  + " consumer-dedup leaves out",
              TAKE_RECORDS,
              null);
        }
      }
      if (shape == null) {
        throw invalid(
            "a batch listener must take its records as List<ConsumerRecord<K, V>>,"
                + " List<Message<?>> or ConsumerRecords<K, V>: a list of payloads cannot be"
                + " matched to the records' keys and filtered",
            TAKE_RECORDS,
            null);
      }
      if (returns != Returns.VALUE) {
        throw invalid(
            "a batch listener must finish its work before it returns",
            "Return void, not a future or Mono",
            null);
      }
      if (mode == DedupMode.TRANSACTIONAL) {
        throw invalid(
            "mode TRANSACTIONAL is not supported for batch listeners: one database transaction"
                + " for the whole batch rolls back the records before a failed one, while"
                + " spring-kafka commits their offsets",
            "Use mode SEPARATE, or a record listener in mode TRANSACTIONAL (one transaction per"
                + " record)",
            null);
      }
      this.batch = shape;
      this.batchIndex = index;
    } else {
      this.batch = null;
      this.batchIndex = -1;
    }
    ResolvableType payload = payloadType(method);
    check("key", key, payload);
    check("fingerprint", fingerprint, payload);
  }

  /**
   * The declared type of {@code #payload}, as {@link Call#payload()} takes it: a message's payload,
   * the payload argument, else the record's value; for a batch, the element's.
   */
  private ResolvableType payloadType(Method method) {
    if (batch != null) {
      ResolvableType parameter = ResolvableType.forMethodParameter(method, batchIndex);
      return switch (batch) {
        case RECORDS -> parameter.getGeneric(0).as(ConsumerRecord.class).getGeneric(1);
        case MESSAGES -> parameter.getGeneric(0).as(Message.class).getGeneric(0);
        case CONSUMER_RECORDS -> parameter.as(ConsumerRecords.class).getGeneric(1);
      };
    }
    if (messageIndex >= 0) {
      return ResolvableType.forMethodParameter(method, messageIndex)
          .as(Message.class)
          .getGeneric(0);
    }
    if (payloadIndex >= 0) {
      return ResolvableType.forMethodParameter(method, payloadIndex);
    }
    if (recordIndex >= 0) {
      return ResolvableType.forMethodParameter(method, recordIndex)
          .as(ConsumerRecord.class)
          .getGeneric(1);
    }
    return ResolvableType.NONE;
  }

  /** The batch form of a parameter type, or null if it is not one consumer-dedup can filter. */
  private static @Nullable BatchShape batchShapeOf(Type type) {
    Class<?> raw =
        type instanceof ParameterizedType p && p.getRawType() instanceof Class<?> c
            ? c
            : type instanceof Class<?> c ? c : Object.class;
    if (ConsumerRecords.class.isAssignableFrom(raw)) {
      return BatchShape.CONSUMER_RECORDS;
    }
    if (raw != java.util.List.class || !(type instanceof ParameterizedType parameterized)) {
      return null;
    }
    Type element = parameterized.getActualTypeArguments()[0];
    Class<?> elementClass =
        element instanceof ParameterizedType p && p.getRawType() instanceof Class<?> c
            ? c
            : element instanceof Class<?> c ? c : Object.class;
    if (ConsumerRecord.class.isAssignableFrom(elementClass)) {
      return BatchShape.RECORDS;
    }
    if (Message.class.isAssignableFrom(elementClass)) {
      return BatchShape.MESSAGES;
    }
    return null;
  }

  /** Where the key comes from, as a user wrote it: {@code header 'order-no'}, or the expression. */
  String keySource() {
    return header != null
        ? "header '" + header + "'"
        : "key expression '" + java.util.Objects.requireNonNull(key).getExpressionString() + "'";
  }

  /**
   * The parsed annotation of {@code method}, or null if it has none.
   *
   * @param beanName the bean whose method it is, named in a refusal; null if unknown
   * @throws InvalidIdempotentListenerException if the annotation or the method cannot work
   */
  static @Nullable IdempotentListenerMethod of(Method method, @Nullable String beanName) {
    Idempotent annotation = AnnotatedElementUtils.findMergedAnnotation(method, Idempotent.class);
    return annotation == null ? null : new IdempotentListenerMethod(method, annotation, beanName);
  }

  /** Listener shapes whose calls consumer-dedup cannot see through, refused with the remedy. */
  private void refuseUnprotectable(Method method) {
    int modifiers = method.getModifiers();
    if (Modifier.isFinal(modifiers)
        || Modifier.isStatic(modifiers)
        || Modifier.isPrivate(modifiers)) {
      throw invalid(
          "the method is "
              + (Modifier.isFinal(modifiers)
                  ? "final"
                  : Modifier.isStatic(modifiers) ? "static" : "private")
              + ", so the proxy cannot intercept it and nothing would be deduplicated",
          "Make it a non-final, non-private instance method (public, protected or package-private)",
          null);
    }
    for (Class<?> type : method.getParameterTypes()) {
      if (type.getName().equals(KOTLIN_CONTINUATION)) {
        throw invalid(
            "Kotlin suspend functions are not supported (the proxy sees the call return before"
                + " its body runs)",
            "Return a CompletableFuture or a Mono instead",
            null);
      }
    }
    if (AnnotatedElementUtils.hasAnnotation(method, SendTo.class)
        || AnnotatedElementUtils.hasAnnotation(method.getDeclaringClass(), SendTo.class)) {
      throw invalid(
          "@SendTo is not supported: a duplicate request would get no reply, since the method is"
              + " not invoked again",
          "Send the reply from the method with a KafkaTemplate, keyed by the request, so that a"
              + " requester can wait for the first one",
          null);
    }
  }

  private static boolean isBatch(Method method) {
    KafkaListener listener =
        AnnotatedElementUtils.findMergedAnnotation(method, KafkaListener.class);
    if (listener != null && "true".equalsIgnoreCase(listener.batch().trim())) {
      return true;
    }
    for (Type type : method.getGenericParameterTypes()) {
      if (type instanceof Class<?> raw && ConsumerRecords.class.isAssignableFrom(raw)) {
        return true;
      }
      if (type instanceof ParameterizedType parameterized
          && parameterized.getRawType() instanceof Class<?> raw) {
        if (ConsumerRecords.class.isAssignableFrom(raw)) {
          return true;
        }
        Type element = parameterized.getActualTypeArguments()[0];
        Class<?> elementClass =
            element instanceof ParameterizedType p && p.getRawType() instanceof Class<?> c
                ? c
                : element instanceof Class<?> c ? c : Object.class;
        if (Collection.class.isAssignableFrom(raw)
            && (ConsumerRecord.class.isAssignableFrom(elementClass)
                || Message.class.isAssignableFrom(elementClass))) {
          return true;
        }
      }
    }
    return false;
  }

  /** Parameters resolved from something else than the payload, as spring-messaging does. */
  private static boolean claimedByAnotherResolver(MethodParameter parameter) {
    Class<?> type = parameter.getParameterType();
    return parameter.hasParameterAnnotation(
            org.springframework.messaging.handler.annotation.Header.class)
        || parameter.hasParameterAnnotation(Headers.class)
        || Consumer.class.isAssignableFrom(type)
        || ConsumerRecordMetadata.class.isAssignableFrom(type)
        || MessageHeaders.class.isAssignableFrom(type)
        || MessageHeaderAccessor.class.isAssignableFrom(type)
        || type.getName().equals(KOTLIN_CONTINUATION)
        || type.getName().equals("org.springframework.kafka.support.ShareAcknowledgment");
  }

  private static Returns returnsOf(Class<?> type) {
    if (CompletionStage.class.isAssignableFrom(type)) {
      return Returns.FUTURE;
    }
    if (REACTOR_PRESENT && MonoOutcomes.isMono(type)) {
      return Returns.MONO;
    }
    return Returns.VALUE;
  }

  /** What the method returns for a duplicate, in place of invoking it. */
  @Nullable Object duplicateResult() {
    return switch (returns) {
      case FUTURE -> CompletableFuture.completedFuture(null);
      case MONO -> MonoOutcomes.empty();
      case VALUE ->
          returnType.isPrimitive() && returnType != void.class
              ? java.lang.reflect.Array.get(java.lang.reflect.Array.newInstance(returnType, 1), 0)
              : null;
    };
  }

  /**
   * The record being delivered: the method's {@code ConsumerRecord} argument, else the one the
   * container hands over on this thread.
   */
  @SuppressWarnings("unchecked")
  ConsumerRecord<Object, Object> record(@Nullable Object[] arguments) {
    if (recordIndex >= 0 && arguments[recordIndex] != null) {
      return (ConsumerRecord<Object, Object>) arguments[recordIndex];
    }
    return (ConsumerRecord<Object, Object>)
        CurrentRecordInterceptor.current()
            .orElseThrow(
                () ->
                    new IllegalStateException(
                        "@Idempotent listener "
                            + this
                            + " was called without a record: it takes no ConsumerRecord argument"
                            + " and its container does not run CurrentRecordInterceptor (the"
                            + " auto-configuration adds it to every listener container; for a"
                            + " container made by hand call DedupContainers.configure(container)),"
                            + " or it was called outside a Kafka listener container"));
  }

  /** One call's view for key and fingerprint expressions; its SpEL context is made when needed. */
  Call call(
      ConsumerRecord<Object, Object> record,
      @Nullable Object[] arguments,
      @Nullable BeanFactory beanFactory) {
    return new Call(record, arguments, null, beanFactory);
  }

  /**
   * The view of one record of a batch: {@code #payload} is {@code payload} (a message's payload, or
   * the record's value).
   */
  Call batchCall(
      ConsumerRecord<Object, Object> record,
      @Nullable Object payload,
      @Nullable BeanFactory beanFactory) {
    return new Call(record, null, new Object[] {payload}, beanFactory);
  }

  /** The key and fingerprint of one call. */
  final class Call {
    private final ConsumerRecord<Object, Object> record;
    private final @Nullable Object @Nullable [] arguments;
    private final @Nullable Object @Nullable [] batchPayload;
    private final @Nullable BeanFactory beanFactory;
    private @Nullable EvaluationContext context;

    private Call(
        ConsumerRecord<Object, Object> record,
        @Nullable Object @Nullable [] arguments,
        @Nullable Object @Nullable [] batchPayload,
        @Nullable BeanFactory beanFactory) {
      this.record = record;
      this.arguments = arguments;
      this.batchPayload = batchPayload;
      this.beanFactory = beanFactory;
    }

    /** How the business key is taken from the record: its header, or the key expression. */
    KeyExtractor<Object, Object> keyExtractor() {
      if (header != null) {
        return KeyExtractors.header(header);
      }
      Expression expression = java.util.Objects.requireNonNull(key);
      return KeyExtractor.named(
          keySource(),
          ignored -> {
            String value = evaluate("key", expression);
            return value == null || value.isEmpty() ? Optional.empty() : Optional.of(value);
          });
    }

    /** The SHA-256 of the fingerprint expression's value, or null without one. */
    @Nullable String fingerprint() {
      if (fingerprint == null) {
        return null;
      }
      String value = evaluate("fingerprint", fingerprint);
      return value == null ? null : sha256(value);
    }

    private @Nullable String evaluate(String what, Expression expression) {
      Object value;
      try {
        value = expression.getValue(context());
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
                    + name
                    + " failed on this record: "
                    + (e instanceof EvaluationException ? e.getMessage() : e.toString()),
                RecordSources.describe(record, KafkaUtils.getConsumerGroupId()),
                e);
        // A dead-letter recoverer publishes the record without logging why.
        log.warn("{}; refused as a malformed key, not retried", malformed.getMessage());
        throw malformed;
      }
      return value == null ? null : value.toString();
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
        made.setVariable(KeyExpressionCheck.PAYLOAD, payload());
        context = made;
      }
      return context;
    }

    private @Nullable Object payload() {
      if (batchPayload != null) {
        return batchPayload[0];
      }
      if (arguments == null) {
        return record.value();
      }
      if (messageIndex >= 0 && arguments[messageIndex] instanceof Message<?> message) {
        return message.getPayload();
      }
      if (payloadIndex >= 0) {
        return arguments[payloadIndex];
      }
      return record.value();
    }
  }

  private static String sha256(String value) {
    try {
      MessageDigest digest = MessageDigest.getInstance("SHA-256");
      return HexFormat.of().formatHex(digest.digest(value.getBytes(StandardCharsets.UTF_8)));
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("SHA-256 is required of every Java platform", e);
    }
  }

  private Expression parse(String what, String text) {
    try {
      return PARSER.parseExpression(text);
    } catch (ParseException e) {
      throw invalid(
          what
              + " expression '"
              + text
              + "' does not parse"
              + (e.getPosition() >= 0 ? " (at character " + e.getPosition() + ")" : "")
              + ": "
              + e.getSimpleMessage(),
          "Write a SpEL expression over "
              + KeyExpressionCheck.VARIABLE_LIST
              + (what.equals("key") ? ", or header = \"name\" to take the key from a header" : ""),
          e);
    }
  }

  /** Refuses an expression that cannot give a key, now rather than on every record. */
  private void check(String what, @Nullable Expression expression, ResolvableType payload) {
    if (expression != null) {
      KeyExpressionCheck.Refusal refusal = KeyExpressionCheck.check(what, expression, payload);
      if (refusal != null) {
        throw invalid(refusal.problem(), refusal.action(), null);
      }
    }
  }

  private <T> @Nullable T single(String what, T[] values) {
    if (values.length > 1) {
      throw invalid(
          what + " takes at most one value",
          "Give one value, or none for the consumer-dedup.* property",
          null);
    }
    return values.length == 0 ? null : values[0];
  }

  private InvalidIdempotentListenerException invalid(
      String problem, String action, @Nullable Throwable cause) {
    return new InvalidIdempotentListenerException(name, beanName, problem, action, cause);
  }

  @Override
  public String toString() {
    return name;
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
