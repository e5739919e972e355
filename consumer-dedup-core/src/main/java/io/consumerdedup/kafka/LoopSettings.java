package io.consumerdedup.kafka;

import io.consumerdedup.core.internal.Durations;
import java.time.Duration;
import java.util.Objects;
import org.jspecify.annotations.Nullable;

/**
 * The settings that the builders of {@link DedupPollLoop} and {@link DedupShareLoop} share, each
 * validated as it is set: one place for what each accepts. The builders keep their own defaults and
 * javadoc, since what a setting means differs a little between the two loops.
 */
final class LoopSettings<K, V> {
  private @Nullable DeadLetterHandler<K, V> deadLetterHandler;
  private Duration pollTimeout;
  private int maxAttempts;
  private Duration retryBackOff;
  private Duration holdBackOff;
  private Duration maxHoldBackOff;
  private Duration closeTimeout;

  LoopSettings(
      Duration pollTimeout,
      int maxAttempts,
      Duration retryBackOff,
      Duration holdBackOff,
      Duration maxHoldBackOff,
      Duration closeTimeout) {
    this.pollTimeout = pollTimeout;
    this.maxAttempts = maxAttempts;
    this.retryBackOff = retryBackOff;
    this.holdBackOff = holdBackOff;
    this.maxHoldBackOff = maxHoldBackOff;
    this.closeTimeout = closeTimeout;
  }

  void deadLetterHandler(DeadLetterHandler<K, V> deadLetterHandler) {
    this.deadLetterHandler = Objects.requireNonNull(deadLetterHandler, "deadLetterHandler");
  }

  void maxAttempts(int maxAttempts) {
    if (maxAttempts < 1) {
      throw new IllegalArgumentException("maxAttempts must be at least 1, was " + maxAttempts);
    }
    this.maxAttempts = maxAttempts;
  }

  void retryBackOff(Duration retryBackOff) {
    this.retryBackOff = Durations.requirePositive("retryBackOff", retryBackOff);
  }

  void holdBackOff(Duration initial, Duration max) {
    Durations.requirePositive("initial hold back-off", initial);
    Durations.requirePositive("max hold back-off", max);
    if (initial.compareTo(max) > 0) {
      throw new IllegalArgumentException(
          "initial hold back-off (" + initial + ") must not exceed the max (" + max + ")");
    }
    this.holdBackOff = initial;
    this.maxHoldBackOff = max;
  }

  void pollTimeout(Duration pollTimeout) {
    this.pollTimeout = Durations.requirePositive("pollTimeout", pollTimeout);
  }

  void closeTimeout(Duration closeTimeout) {
    this.closeTimeout = Durations.requirePositive("closeTimeout", closeTimeout);
  }

  /**
   * The dead-letter handler, which both loops require.
   *
   * @throws IllegalStateException none was set; {@code why} says what it is needed for
   */
  DeadLetterHandler<K, V> requireDeadLetterHandler(String why) {
    if (deadLetterHandler == null) {
      throw new IllegalStateException("deadLetterHandler is required: " + why);
    }
    return deadLetterHandler;
  }

  Duration pollTimeout() {
    return pollTimeout;
  }

  int maxAttempts() {
    return maxAttempts;
  }

  Duration retryBackOff() {
    return retryBackOff;
  }

  Duration holdBackOff() {
    return holdBackOff;
  }

  Duration maxHoldBackOff() {
    return maxHoldBackOff;
  }

  Duration closeTimeout() {
    return closeTimeout;
  }
}
