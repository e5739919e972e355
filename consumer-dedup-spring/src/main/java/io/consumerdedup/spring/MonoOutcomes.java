package io.consumerdedup.spring;

import java.util.concurrent.CompletableFuture;
import java.util.function.Function;
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

  /**
   * The listener's Mono, ending only once {@code settle} has recorded its outcome: spring-kafka
   * acknowledges the record when the returned Mono completes.
   */
  static Mono<?> settledWhenDone(
      Object mono, Function<CompletableFuture<?>, CompletableFuture<?>> settle) {
    return Mono.fromFuture(settle.apply(((Mono<?>) mono).toFuture()));
  }
}
