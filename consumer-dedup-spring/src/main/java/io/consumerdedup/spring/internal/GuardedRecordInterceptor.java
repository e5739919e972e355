package io.consumerdedup.spring.internal;

import java.util.Objects;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;
import org.springframework.kafka.listener.RecordInterceptor;

/**
 * The application's record interceptor followed by consumer-dedup's, like spring-kafka's {@code
 * CompositeRecordInterceptor}, except that whatever the first throws in {@code success}, {@code
 * failure}, {@code afterRecord} or the thread-state calls, an {@code Error} included, does not keep
 * the second from being called: consumer-dedup's must see every record through, or a claim would be
 * left open. Once both have run, what the first threw is rethrown, with what the second threw added
 * as suppressed; what the second alone threw is rethrown as it is. The second is one of
 * consumer-dedup's interceptors, whose {@code setupThreadState} throws an {@code Error} held from
 * {@code clearThreadState}.
 */
public final class GuardedRecordInterceptor<K, V> implements RecordInterceptor<K, V> {
  private final RecordInterceptor<K, V> first;
  private final RecordInterceptor<K, V> second;

  public GuardedRecordInterceptor(RecordInterceptor<K, V> first, RecordInterceptor<K, V> second) {
    this.first = Objects.requireNonNull(first, "first");
    this.second = Objects.requireNonNull(second, "second");
  }

  /** Whether {@code interceptor} is, or has as this composite's second, a {@code type}. */
  public static boolean contains(@Nullable RecordInterceptor<?, ?> interceptor, Class<?> type) {
    return type.isInstance(interceptor)
        || (interceptor instanceof GuardedRecordInterceptor<?, ?> guarded
            && type.isInstance(guarded.second));
  }

  @Override
  public @Nullable ConsumerRecord<K, V> intercept(
      ConsumerRecord<K, V> record, Consumer<K, V> consumer) {
    ConsumerRecord<K, V> intercepted = first.intercept(record, consumer);
    return intercepted == null ? null : second.intercept(intercepted, consumer);
  }

  @Override
  public void success(ConsumerRecord<K, V> record, Consumer<K, V> consumer) {
    both(() -> first.success(record, consumer), () -> second.success(record, consumer));
  }

  @Override
  public void failure(ConsumerRecord<K, V> record, Exception exception, Consumer<K, V> consumer) {
    both(
        () -> first.failure(record, exception, consumer),
        () -> second.failure(record, exception, consumer));
  }

  @Override
  public void afterRecord(ConsumerRecord<K, V> record, Consumer<K, V> consumer) {
    both(() -> first.afterRecord(record, consumer), () -> second.afterRecord(record, consumer));
  }

  @Override
  public void setupThreadState(Consumer<?, ?> consumer) {
    both(() -> first.setupThreadState(consumer), () -> second.setupThreadState(consumer));
  }

  /**
   * An {@code Error} of either is thrown as the thread sets up its next poll ({@link
   * ThreadStateErrors}), by the second's {@code setupThreadState}: spring-kafka stops the container
   * cleanly then, where thrown from here it ended the consumer thread without closing the consumer.
   */
  @Override
  public void clearThreadState(Consumer<?, ?> consumer) {
    ThreadStateErrors.clearing(
        consumer,
        () ->
            both(() -> first.clearThreadState(consumer), () -> second.clearThreadState(consumer)));
  }

  private static void both(Runnable firstCall, Runnable secondCall) {
    try {
      firstCall.run();
    } catch (Throwable firstFailure) {
      // An Error too: the second must still run, or its claim would be left open.
      try {
        secondCall.run();
      } catch (Throwable secondFailure) {
        if (secondFailure != firstFailure) {
          firstFailure.addSuppressed(secondFailure);
        }
      }
      throw firstFailure;
    }
    secondCall.run();
  }

  @Override
  public String toString() {
    return "GuardedRecordInterceptor{" + first + ", " + second + "}";
  }
}
