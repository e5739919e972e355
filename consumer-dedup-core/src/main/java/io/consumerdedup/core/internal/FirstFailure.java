package io.consumerdedup.core.internal;

import org.jspecify.annotations.Nullable;

/** Of the failures met one after another before one is thrown, the first, the later suppressed. */
public final class FirstFailure {
  private FirstFailure() {}

  /**
   * {@code first}, with {@code next} suppressed in it, or {@code next} if there was none yet; the
   * same throwable met twice is not suppressed in itself, which {@code addSuppressed} refuses.
   */
  public static <T extends Throwable> T of(@Nullable T first, T next) {
    if (first == null) {
      return next;
    }
    if (first != next) {
      try {
        first.addSuppressed(next); // allocates the list on the first call
      } catch (Throwable noRoom) {
        // a second OutOfMemoryError here must not take the place of the first; only this trace is
        // lost
      }
    }
    return first;
  }
}
