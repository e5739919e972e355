package io.consumerdedup.kafka;

import io.consumerdedup.core.internal.Durations;
import io.consumerdedup.kafka.internal.UndeserializableRecords;
import java.time.Duration;
import java.util.Objects;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;

/**
 * The settings that the builders of {@link DedupPollLoop} and {@link DedupShareLoop} share, each
 * validated as it is set: one place for what each accepts and for its default. The builders keep
 * their own javadoc, since what a setting means differs a little between the two loops.
 */
final class LoopSettings<K, V> {
  // Both loops' defaults, defined once: each loop names them as its own public DEFAULT_* constants.
  static final Duration DEFAULT_POLL_TIMEOUT = Duration.ofMillis(500);
  static final int DEFAULT_MAX_ATTEMPTS = 3;
  static final Duration DEFAULT_RETRY_BACKOFF = Duration.ofSeconds(1);
  static final Duration DEFAULT_HOLD_BACKOFF = Duration.ofSeconds(1);
  static final Duration DEFAULT_MAX_HOLD_BACKOFF = Duration.ofSeconds(30);
  static final Duration DEFAULT_CLOSE_TIMEOUT = Duration.ofSeconds(30);

  private @Nullable DeadLetterHandler<K, V> deadLetterHandler;
  private Duration pollTimeout = DEFAULT_POLL_TIMEOUT;
  private int maxAttempts = DEFAULT_MAX_ATTEMPTS;
  private Duration retryBackOff = DEFAULT_RETRY_BACKOFF;
  private Duration holdBackOff = DEFAULT_HOLD_BACKOFF;
  private Duration maxHoldBackOff = DEFAULT_MAX_HOLD_BACKOFF;
  private Duration closeTimeout = DEFAULT_CLOSE_TIMEOUT;

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

  /**
   * Says at build time, on {@code log}, when the dead-letter handler cannot write a record the
   * deserializer rejects; {@code consequence} is what the loop does with such a record then.
   */
  void warnIfUndeserializableCannotBeDeadLettered(Logger log, String consequence) {
    String warning =
        UndeserializableRecords.cannotBeDeadLetteredBy(
            Objects.requireNonNull(deadLetterHandler), consequence);
    if (warning != null) {
      log.warn(warning);
    }
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
