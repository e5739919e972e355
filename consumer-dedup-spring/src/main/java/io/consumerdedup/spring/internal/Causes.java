package io.consumerdedup.spring.internal;

import org.jspecify.annotations.Nullable;

/**
 * Looks through an exception and its causes, as spring-kafka wraps a listener's exception (in a
 * {@code ListenerExecutionFailedException}, a {@code TimestampedException}, ...): at most 32 deep,
 * so that a chain of causes with a cycle cannot hang a container thread.
 */
public final class Causes {
  private static final int MAX_DEPTH = 32;

  private Causes() {}

  /** {@code error} or its first cause that is a {@code type}; null if none is. */
  public static <T extends Throwable> @Nullable T first(@Nullable Throwable error, Class<T> type) {
    int depth = 0;
    for (Throwable current = error;
        current != null && depth < MAX_DEPTH;
        current = current.getCause(), depth++) {
      if (type.isInstance(current)) {
        return type.cast(current);
      }
    }
    return null;
  }
}
