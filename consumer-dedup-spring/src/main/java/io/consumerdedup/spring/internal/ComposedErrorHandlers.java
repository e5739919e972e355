package io.consumerdedup.spring.internal;

import java.lang.reflect.Field;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.kafka.listener.CommonDelegatingErrorHandler;
import org.springframework.kafka.listener.CommonErrorHandler;
import org.springframework.kafka.listener.CommonMixedErrorHandler;
import org.springframework.util.ReflectionUtils;

/**
 * The error handlers that handle a container's failures when its handler is one of spring-kafka's
 * composites, a {@link CommonDelegatingErrorHandler} (a handler per exception type) or a {@link
 * CommonMixedErrorHandler} (one for record listeners, one for batch listeners): what consumer-dedup
 * teaches a {@code DefaultErrorHandler}, and asks of it, must reach the one inside. Neither
 * composite tells its delegates (spring-kafka 4.0 and 4.1), so they are read from its fields.
 */
public final class ComposedErrorHandlers {
  private static final Logger log = LoggerFactory.getLogger(ComposedErrorHandlers.class);

  private static final @Nullable Field DELEGATING_DEFAULT =
      field(CommonDelegatingErrorHandler.class, "defaultErrorHandler");
  private static final @Nullable Field DELEGATING_BY_TYPE =
      field(CommonDelegatingErrorHandler.class, "delegates");
  private static final @Nullable Field MIXED_RECORD =
      field(CommonMixedErrorHandler.class, "recordErrorHandler");
  private static final @Nullable Field MIXED_BATCH =
      field(CommonMixedErrorHandler.class, "batchErrorHandler");

  private ComposedErrorHandlers() {}

  /**
   * The handlers that {@code handler} hands failures to, composites opened however deep they nest;
   * {@code handler} alone when it is none, or when its delegates cannot be read (logged at WARN).
   */
  public static List<CommonErrorHandler> of(CommonErrorHandler handler) {
    List<CommonErrorHandler> handlers = new ArrayList<>();
    addTo(handlers, handler);
    return handlers;
  }

  private static void addTo(List<CommonErrorHandler> handlers, CommonErrorHandler handler) {
    List<Object> delegates = delegates(handler);
    if (delegates == null) {
      if (!handlers.contains(handler)) {
        handlers.add(handler);
      }
      return;
    }
    for (Object delegate : delegates) {
      if (delegate instanceof CommonErrorHandler inner) {
        addTo(handlers, inner);
      }
    }
  }

  /** The delegates of a composite; null for another handler, or if they cannot be read. */
  private static @Nullable List<Object> delegates(CommonErrorHandler handler) {
    List<Object> delegates = new ArrayList<>();
    try {
      if (handler instanceof CommonDelegatingErrorHandler
          && DELEGATING_DEFAULT != null
          && DELEGATING_BY_TYPE != null) {
        delegates.add(ReflectionUtils.getField(DELEGATING_DEFAULT, handler));
        if (ReflectionUtils.getField(DELEGATING_BY_TYPE, handler) instanceof Map<?, ?> byType) {
          delegates.addAll(byType.values());
        }
        return delegates;
      }
      if (handler instanceof CommonMixedErrorHandler
          && MIXED_RECORD != null
          && MIXED_BATCH != null) {
        delegates.add(ReflectionUtils.getField(MIXED_RECORD, handler));
        delegates.add(ReflectionUtils.getField(MIXED_BATCH, handler));
        return delegates;
      }
    } catch (RuntimeException e) {
      log.debug("Cannot read the delegates of {}", handler, e);
    }
    if (handler instanceof CommonDelegatingErrorHandler
        || handler instanceof CommonMixedErrorHandler) {
      log.warn(
          "Cannot read the error handlers inside {}: a DefaultErrorHandler among them neither"
              + " dead-letters consumer-dedup's exceptions that are not retryable at once, nor logs"
              + " the records it gives up on",
          handler);
    }
    return null;
  }

  private static @Nullable Field field(Class<?> type, String name) {
    try {
      Field field = ReflectionUtils.findField(type, name);
      if (field != null) {
        ReflectionUtils.makeAccessible(field);
      }
      return field;
    } catch (RuntimeException e) {
      log.debug("Cannot read {}.{}", type.getName(), name, e);
      return null;
    }
  }
}
