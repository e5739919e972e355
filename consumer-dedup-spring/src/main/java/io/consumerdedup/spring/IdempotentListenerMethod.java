package io.consumerdedup.spring;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.InProgressPolicy;
import io.consumerdedup.kafka.MissingKeyPolicy;
import java.lang.annotation.Annotation;
import java.lang.reflect.Method;
import java.time.Duration;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;
import org.springframework.boot.convert.DurationStyle;
import org.springframework.core.annotation.AnnotatedElementUtils;
import org.springframework.expression.Expression;
import org.springframework.expression.ParseException;
import org.springframework.expression.spel.standard.SpelExpressionParser;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.messaging.Message;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.messaging.handler.annotation.Headers;
import org.springframework.messaging.handler.annotation.Payload;

/**
 * One {@link Idempotent} listener method, its annotation parsed and checked once (at start-up, by
 * {@link IdempotentListenerPostProcessor}), so a mistake fails the application, not a record.
 */
final class IdempotentListenerMethod {
  private static final SpelExpressionParser PARSER = new SpelExpressionParser();

  final String name;
  final String bizType;
  final @Nullable String header;
  final @Nullable Expression key;
  final @Nullable Expression fingerprint;
  final @Nullable MissingKeyPolicy missingKeyPolicy;
  final IdempotentExecutors.Overrides overrides;

  /** Index of the argument that is the record, or -1. */
  final int recordIndex;

  /** Index of the argument that is a {@code Message<?>}, or -1. */
  final int messageIndex;

  /** Index of the argument that is the converted payload, or -1 (then the record value). */
  final int payloadIndex;

  private IdempotentListenerMethod(Method method, Idempotent annotation) {
    this.name = method.getDeclaringClass().getName() + "#" + method.getName();
    this.bizType = annotation.bizType();
    try {
      DedupKey.of(bizType, "check");
    } catch (IllegalArgumentException e) {
      throw invalid("bizType: " + e.getMessage(), e);
    }
    boolean hasHeader = !annotation.header().isBlank();
    boolean hasKey = !annotation.key().isBlank();
    if (hasHeader == hasKey) {
      throw invalid("give exactly one of header and key", null);
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
      try {
        lease = DurationStyle.detectAndParse(annotation.lease());
      } catch (IllegalArgumentException e) {
        throw invalid("lease '" + annotation.lease() + "' is not a duration", e);
      }
      if (lease.isNegative() || lease.isZero()) {
        throw invalid("lease must be positive, was " + annotation.lease(), null);
      }
    }
    this.overrides = new IdempotentExecutors.Overrides(lease, inProgress, mode);

    Class<?>[] types = method.getParameterTypes();
    Annotation[][] annotations = method.getParameterAnnotations();
    int record = -1;
    int message = -1;
    int payload = -1;
    int unannotated = -1;
    for (int i = 0; i < types.length; i++) {
      if (ConsumerRecord.class.isAssignableFrom(types[i])) {
        record = record < 0 ? i : record;
      } else if (Message.class.isAssignableFrom(types[i])) {
        message = message < 0 ? i : message;
      } else if (has(annotations[i], Payload.class)) {
        payload = payload < 0 ? i : payload;
      } else if (unannotated < 0
          && !has(annotations[i], Header.class)
          && !has(annotations[i], Headers.class)
          && !Acknowledgment.class.isAssignableFrom(types[i])
          && !Consumer.class.isAssignableFrom(types[i])) {
        unannotated = i;
      }
    }
    this.recordIndex = record;
    this.messageIndex = message;
    this.payloadIndex = payload >= 0 ? payload : unannotated;
  }

  /** The parsed annotation of {@code method}, or null if it has none. */
  static @Nullable IdempotentListenerMethod of(Method method) {
    Idempotent annotation = AnnotatedElementUtils.findMergedAnnotation(method, Idempotent.class);
    return annotation == null ? null : new IdempotentListenerMethod(method, annotation);
  }

  private Expression parse(String what, String text) {
    try {
      return PARSER.parseExpression(text);
    } catch (ParseException e) {
      throw invalid(what + " expression '" + text + "' does not parse: " + e.getMessage(), e);
    }
  }

  private <T> @Nullable T single(String what, T[] values) {
    if (values.length > 1) {
      throw invalid(what + " takes at most one value", null);
    }
    return values.length == 0 ? null : values[0];
  }

  private IllegalStateException invalid(String problem, @Nullable Throwable cause) {
    return new IllegalStateException("@Idempotent on " + name + ": " + problem, cause);
  }

  private static boolean has(Annotation[] annotations, Class<? extends Annotation> type) {
    for (Annotation annotation : annotations) {
      if (type.isInstance(annotation)) {
        return true;
      }
    }
    return false;
  }

  @Override
  public String toString() {
    return name;
  }
}
