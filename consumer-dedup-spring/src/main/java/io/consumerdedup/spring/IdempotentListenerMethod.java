package io.consumerdedup.spring;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.InProgressPolicy;
import io.consumerdedup.kafka.MissingKeyPolicy;
import io.consumerdedup.kafka.internal.RecordSources;
import io.consumerdedup.spring.internal.CurrentBatch;
import io.consumerdedup.spring.internal.CurrentRecordInterceptor;
import java.lang.reflect.Method;
import java.time.Duration;
import java.time.temporal.ChronoUnit;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;
import org.springframework.beans.factory.BeanFactory;
import org.springframework.beans.factory.config.ConfigurableBeanFactory;
import org.springframework.boot.convert.DurationStyle;
import org.springframework.core.ResolvableType;
import org.springframework.core.annotation.AnnotatedElementUtils;
import org.springframework.expression.Expression;
import org.springframework.expression.ParseException;
import org.springframework.expression.spel.standard.SpelExpressionParser;
import org.springframework.kafka.annotation.DltHandler;
import org.springframework.kafka.annotation.KafkaHandler;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.annotation.KafkaListeners;
import org.springframework.kafka.support.KafkaUtils;
import org.springframework.util.ReflectionUtils;

/**
 * One {@link Idempotent} listener method: its annotation parsed and its signature read once, at
 * start-up ({@link IdempotentListenerPostProcessor}), so that a mistake, or a listener shape that
 * consumer-dedup cannot protect ({@link ListenerShapeRefusals}), fails the application with what to
 * do instead, not a record. Its {@link ListenerShape} tells where a call's record, payload and
 * acknowledgment are, and what a duplicate returns.
 */
final class IdempotentListenerMethod {
  private static final SpelExpressionParser PARSER = new SpelExpressionParser();

  final String name;

  /** The bean whose method it is, if known; named in refusals. */
  private final @Nullable String beanName;

  final String bizType;
  final @Nullable String header;
  final @Nullable Expression key;
  final @Nullable Expression fingerprint;
  final @Nullable MissingKeyPolicy missingKeyPolicy;
  final IdempotentExecutors.Overrides overrides;

  /** Its arguments, batch form and return. */
  final ListenerShape shape;

  /** The method as spring-kafka names it when it cannot be called ({@code toGenericString}). */
  final String signature;

  /** See {@link KeyHeaderArguments}. */
  final Set<String> keyHeaderArguments;

  /** The {@code @KafkaListener} id, if the method or its class gives one. */
  final String listenerId;

  /** The {@code @KafkaListener} of the method, else of its class; null if neither has one. */
  final @Nullable KafkaListener kafkaListener;

  /**
   * Whether its {@code @KafkaListener} is its class's: a {@code @KafkaHandler} method, one of
   * several the container may hand a poll's records to.
   */
  final boolean classLevel;

  /**
   * Whether its record is its own to acknowledge: a container calls it ({@code @KafkaListener},
   * repeated or not, {@code @KafkaHandler}, {@code @DltHandler}), or it takes the {@code
   * Acknowledgment} as an argument (a listener built by hand handing it over). A method a listener
   * calls with only its message leaves the record to that listener, which says when its record is
   * done: it may go on, after a method that is a duplicate, to one that fails.
   */
  final boolean acknowledgesItsRecord;

  /** Whether the key or fingerprint expression reads {@code #payload}. */
  final boolean readsPayload;

  /** See {@link #selfCallWarning(Method)}; null when calls to it are deduplicated. */
  final @Nullable String selfCallWarning;

  private IdempotentListenerMethod(
      Method method,
      Idempotent annotation,
      @Nullable String beanName,
      @Nullable BeanFactory beanFactory) {
    this.name = method.getDeclaringClass().getName() + "#" + method.getName();
    this.beanName = beanName;
    this.signature = method.toGenericString();
    refuse(ListenerShapeRefusals.unprotectable(method));
    this.bizType = resolved("bizType", annotation.bizType(), beanFactory);
    try {
      DedupKey.of(bizType, "check");
    } catch (IllegalArgumentException e) {
      throw invalid(
          String.valueOf(e.getMessage()),
          bizType.codePointCount(0, bizType.length()) > DedupKey.MAX_BIZ_TYPE_LENGTH
              ? "Shorten it to at most "
                  + DedupKey.MAX_BIZ_TYPE_LENGTH
                  + " characters, the width of the table's biz_type column: bizType ="
                  + " \"payment\""
              : "Name the kind of action the listener performs: bizType = \"payment\"",
          e);
    }
    // Decided on the resolved values: "${app.key-header:}" is not blank as written, and resolving
    // to blank it passed start-up and then failed on every record.
    String headerName = resolvedNotBlank("header", annotation.header(), beanFactory);
    String keyText = resolvedNotBlank("key", annotation.key(), beanFactory);
    boolean hasHeader = !headerName.isEmpty();
    boolean hasKey = !keyText.isEmpty();
    if (hasHeader == hasKey) {
      throw invalid(
          hasHeader ? "it gives both header and key" : "it gives neither header nor key",
          "Give exactly one of header and key: header = \"order-no\" takes the key from that"
              + " header, key = \"#payload.orderNo\" from a SpEL expression",
          null);
    }
    this.header = hasHeader ? headerName : null;
    this.key = hasKey ? parse("key", keyText) : null;
    this.fingerprint =
        annotation.fingerprint().isBlank()
            ? null
            : parse("fingerprint", resolved("fingerprint", annotation.fingerprint(), beanFactory));
    this.missingKeyPolicy = single("missingKeyPolicy", annotation.missingKeyPolicy());
    InProgressPolicy inProgress = single("inProgressPolicy", annotation.inProgressPolicy());
    DedupMode mode = single("mode", annotation.mode());
    Duration lease = null;
    if (!annotation.lease().isBlank()) {
      String leaseAction =
          "Write a duration of at least 1s such as lease = \"30s\" or \"10m\", or leave it out for"
              + " consumer-dedup.lease";
      try {
        // A bare number means seconds, as in consumer-dedup.lease: read as Spring's default
        // milliseconds, lease = "30" gave a lease that a GC pause outlasts.
        lease = DurationStyle.detectAndParse(annotation.lease(), ChronoUnit.SECONDS);
      } catch (IllegalArgumentException e) {
        throw invalid("lease '" + annotation.lease() + "' is not a duration", leaseAction, e);
      }
      if (lease.compareTo(IdempotentListenerInterceptor.SHORTEST_LEASE) < 0) {
        throw invalid("lease must be at least 1s, was " + annotation.lease(), leaseAction, null);
      }
    }
    this.overrides = new IdempotentExecutors.Overrides(lease, inProgress, mode);
    this.shape = new ListenerShape(method, beanFactory);
    this.keyHeaderArguments = KeyHeaderArguments.of(method, header, key);
    KafkaListener listener =
        AnnotatedElementUtils.findMergedAnnotation(method, KafkaListener.class);
    this.classLevel = listener == null;
    if (listener == null) {
      listener =
          AnnotatedElementUtils.findMergedAnnotation(
              method.getDeclaringClass(), KafkaListener.class);
    }
    this.kafkaListener = listener;
    this.acknowledgesItsRecord =
        isListenerMethod(method)
            || AnnotatedElementUtils.hasAnnotation(method, DltHandler.class)
            || shape.ackIndex >= 0;
    this.selfCallWarning = selfCallWarning(method);
    this.readsPayload = readsPayload(key) || readsPayload(fingerprint);
    this.listenerId = listener == null ? "" : listener.id();
    refuse(ListenerShapeRefusals.batch(shape, mode));
    ResolvableType payload = shape.payloadType();
    check("key", key, payload);
    check("fingerprint", fingerprint, payload);
  }

  private static boolean readsPayload(@Nullable Expression expression) {
    return expression != null
        && expression.getExpressionString().contains("#" + KeyExpressionCheck.PAYLOAD);
  }

  /** Where the key comes from, as a user wrote it: {@code header 'order-no'}, or the expression. */
  String keySource() {
    return header != null
        ? "header '" + header + "'"
        : "key expression '" + Objects.requireNonNull(key).getExpressionString() + "'";
  }

  /**
   * The parsed annotation of {@code method}, or null if it has none.
   *
   * @param beanName the bean whose method it is, named in a refusal; null if unknown
   * @param beanFactory resolves its {@code @KafkaListener}'s {@code batch} attribute; may be null
   * @throws InvalidIdempotentListenerException if the annotation or the method cannot work
   */
  static @Nullable IdempotentListenerMethod of(
      Method method, @Nullable String beanName, @Nullable BeanFactory beanFactory) {
    Idempotent annotation = AnnotatedElementUtils.findMergedAnnotation(method, Idempotent.class);
    return annotation == null
        ? null
        : new IdempotentListenerMethod(method, annotation, beanName, beanFactory);
  }

  /**
   * The record being delivered: the method's {@code ConsumerRecord} argument, else the one the
   * container hands over on this thread.
   *
   * @throws DedupConfigurationException the container hands over a batch (its factory makes every
   *     listener a batch listener), and this method, read as a record listener, was never checked
   *     as one. Its batch waits (logged) rather than fail as the method's own failure, which the
   *     error handler retries and then gives up, committing records the method never saw. Or no
   *     record at all is handed over: its container does not run {@link CurrentRecordInterceptor};
   *     the record waits alike. A method that a batch listener calls, taking no record, is told to
   *     take one.
   */
  @SuppressWarnings("unchecked")
  ConsumerRecord<Object, Object> record(@Nullable Object[] arguments) {
    int recordIndex = shape.recordIndex;
    if (recordIndex >= 0 && arguments[recordIndex] != null) {
      return (ConsumerRecord<Object, Object>) arguments[recordIndex];
    }
    List<ConsumerRecord<Object, Object>> batch = CurrentBatch.records();
    if (batch != null && !acknowledgesItsRecord) {
      // A method a batch listener calls: the container's listener is right as it is.
      throw new DedupConfigurationException(
          "@Idempotent method "
              + this
              + " is called by a batch listener and takes no record of its own, so it has no"
              + " record to take its key from: pass it the ConsumerRecord (a ConsumerRecord<K, V>"
              + " argument, the listener taking List<ConsumerRecord<K, V>> and calling it once per"
              + " record), or put @Idempotent on the batch listener itself; the batch waits until"
              + " then",
          null,
          batch.isEmpty()
              ? null
              : RecordSources.describe(batch.get(0), KafkaUtils.getConsumerGroupId()));
    }
    if (batch != null) {
      throw new DedupConfigurationException(
          "@Idempotent listener "
              + this
              + " is called with a batch: its container makes it a batch listener (a container"
              + " factory of batch listeners, such as spring.kafka.listener.type=batch), which"
              + " consumer-dedup does not see from its method, and it takes its records in no form"
              + " consumer-dedup can filter."
              + " Set batch = \"true\" on its @KafkaListener and take List<ConsumerRecord<K, V>>"
              + " or List<Message<?>>, or give it a container factory of record listeners; the"
              + " batch waits until then",
          null,
          batch.isEmpty()
              ? null
              : RecordSources.describe(batch.get(0), KafkaUtils.getConsumerGroupId()));
    }
    return (ConsumerRecord<Object, Object>)
        CurrentRecordInterceptor.current()
            .orElseThrow(
                () ->
                    new DedupConfigurationException(
                        "@Idempotent listener "
                            + this
                            + " was called without a record: it takes no ConsumerRecord argument"
                            + " and its container does not run consumer-dedup's"
                            + " CurrentRecordInterceptor, or it was called outside a Kafka listener"
                            + " container. The auto-configuration prepares every container of the"
                            + " application context before it starts; for a container built by"
                            + " hand or registered after start-up, call"
                            + " DedupContainers.configure(container) before starting it, after"
                            + " setting its own record interceptor (one set afterwards replaces"
                            + " consumer-dedup's); the record waits until then",
                        null,
                        null));
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

  /**
   * {@code value} with its {@code ${...}} placeholders resolved as spring-kafka resolves its
   * {@code @KafkaListener}'s: taken literally, {@code header = "${app.key-header}"} read a header
   * of that name, absent from every record, and {@code bizType = "${spring.application.name}"} gave
   * every service the one biz type, each skipping the others' keys as duplicates.
   */
  private String resolved(String attribute, String value, @Nullable BeanFactory beanFactory) {
    if (!value.contains("${")) {
      return value;
    }
    if (!(beanFactory instanceof ConfigurableBeanFactory configurable)) {
      throw invalid(
          attribute
              + " '"
              + value
              + "' has a placeholder and there is no bean factory to resolve it",
          "Give the value itself, or create the listener in a Spring application context",
          null);
    }
    String resolved;
    try {
      resolved = configurable.resolveEmbeddedValue(value);
    } catch (IllegalArgumentException e) {
      throw unresolved(attribute, value, ": " + e.getMessage(), e);
    }
    // A context without a strict placeholder configurer resolves leniently, leaving the text as is.
    if (resolved == null || resolved.contains("${")) {
      throw unresolved(attribute, value, "", null);
    }
    return resolved;
  }

  /**
   * {@code value} resolved ({@link #resolved}), empty if it is blank as written; refused if only
   * its placeholder's value is blank, naming the placeholder.
   */
  private String resolvedNotBlank(
      String attribute, String value, @Nullable BeanFactory beanFactory) {
    if (value.isBlank()) {
      return "";
    }
    String resolved = resolved(attribute, value, beanFactory);
    if (resolved.isBlank()) {
      throw invalid(
          attribute + " '" + value + "' resolves to a blank value",
          "Set the property it names to a non-blank value, or give a non-blank default:"
              + " ${name:default}",
          null);
    }
    return resolved;
  }

  private InvalidIdempotentListenerException unresolved(
      String attribute, String value, String why, @Nullable Throwable cause) {
    return invalid(
        attribute + " '" + value + "' does not resolve" + why,
        "Define the property it names, or give it a default: ${name:default}",
        cause);
  }

  /**
   * Why calls to an {@code @Idempotent} method that is not a listener method, in a class that has
   * one, may not be deduplicated: a call from that listener on {@code this} passes by the proxy
   * that deduplicates, and every redelivery is applied again. Warned rather than refused: called
   * through the proxy (self-injection, {@code AopContext.currentProxy()}, another bean's listener,
   * a {@code @DltHandler}) it is deduplicated. Null for a listener method or a class without one.
   */
  private @Nullable String selfCallWarning(Method method) {
    if (isListenerMethod(method)) {
      return null;
    }
    Class<?> type = method.getDeclaringClass();
    boolean classListens =
        AnnotatedElementUtils.hasAnnotation(type, KafkaListener.class)
            || Arrays.stream(ReflectionUtils.getAllDeclaredMethods(type))
                .anyMatch(IdempotentListenerMethod::isListenerMethod);
    return classListens
        ? "@Idempotent "
            + name
            + (beanName == null ? "" : " (bean '" + beanName + "')")
            + " is not a @KafkaListener (or @KafkaHandler) method, and its class has one: a call"
            + " from this class's own listener on 'this' bypasses the proxy and gets no dedup."
            + " Put @Idempotent on the @KafkaListener method, or call this method through the"
            + " proxy (another bean, or the bean injected into itself)"
        : null;
  }

  private static boolean isListenerMethod(Method method) {
    // Two @KafkaListener annotations on a method are held in their container, @KafkaListeners.
    return AnnotatedElementUtils.hasAnnotation(method, KafkaListener.class)
        || AnnotatedElementUtils.hasAnnotation(method, KafkaListeners.class)
        || AnnotatedElementUtils.hasAnnotation(method, KafkaHandler.class);
  }

  /** Refuses an expression that cannot give a key, now rather than on every record. */
  private void check(String what, @Nullable Expression expression, ResolvableType payload) {
    if (expression != null) {
      refuse(KeyExpressionCheck.check(what, expression, payload));
    }
  }

  private void refuse(@Nullable ListenerRefusal refusal) {
    if (refusal != null) {
      throw invalid(refusal.problem(), refusal.action(), null);
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
}
