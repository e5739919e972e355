package io.consumerdedup.spring;

import java.util.concurrent.CompletableFuture;
import org.jspecify.annotations.Nullable;
import reactor.core.publisher.Mono;

/**
 * Reactor's {@code Mono} for {@link IdempotentListenerInterceptor}, in a class of its own so that
 * consumer-dedup runs without Reactor on the classpath (it is loaded only when Reactor is there).
 */
final class MonoOutcomes {
  private MonoOutcomes() {}

  static boolean isMono(Class<?> type) {
    return Mono.class.isAssignableFrom(type);
  }

  static Mono<?> empty() {
    return Mono.empty();
  }

  /** The listener's Mono as a future: subscribing to it runs it. */
  static CompletableFuture<?> toFuture(Object mono) {
    return ((Mono<?>) mono).toFuture();
  }

  /** A Mono of an outcome already known: the listener's value, or empty. */
  static Mono<?> of(@Nullable Object value) {
    return Mono.justOrEmpty(value);
  }
}
