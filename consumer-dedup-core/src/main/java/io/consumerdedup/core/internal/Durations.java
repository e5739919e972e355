package io.consumerdedup.core.internal;

import java.time.Duration;
import java.util.Objects;

/** The duration rules every builder of the project shares, so they read and fail alike. */
public final class Durations {
  private Durations() {}

  /**
   * Returns {@code value} if it is positive.
   *
   * @throws IllegalArgumentException naming the setting and the bad value
   */
  public static Duration requirePositive(String name, Duration value) {
    Objects.requireNonNull(value, name);
    if (value.isNegative() || value.isZero()) {
      throw new IllegalArgumentException(name + " must be positive, was " + value);
    }
    return value;
  }

  /**
   * Returns {@code value} if it is at least {@code min} and at most {@code max}.
   *
   * @param why what goes wrong outside the range, said after the bound
   * @throws IllegalArgumentException naming the setting, the bound and the bad value
   */
  public static Duration requireBetween(
      String name, Duration value, Duration min, Duration max, String why) {
    requirePositive(name, value);
    if (value.compareTo(min) < 0) {
      throw new IllegalArgumentException(
          name + " must be at least " + min + " (" + why + "), was " + value);
    }
    if (value.compareTo(max) > 0) {
      throw new IllegalArgumentException(
          name + " must be at most " + max + " (" + why + "), was " + value);
    }
    return value;
  }

  /**
   * The {@code step}-th wait of a back-off that starts at {@code initial} and doubles, never above
   * {@code max}: {@code initial} for step 1.
   */
  public static Duration doubling(Duration initial, Duration max, int step) {
    Duration wait = initial;
    for (int i = 1; i < step && wait.compareTo(max) < 0; i++) {
      wait = wait.multipliedBy(2);
    }
    return wait.compareTo(max) > 0 ? max : wait;
  }
}
