package io.consumerdedup.spring.autoconfigure;

/**
 * {@code @Idempotent} listeners of different consumer groups share a biz type that {@code
 * consumer-dedup.shared-biz-types} does not list: each group would skip the keys the other applied.
 * Thrown at start-up; the message is {@link #problem()} (the two listeners, their groups and the
 * biz type they share) followed by {@link #action()}.
 */
public final class SharedBizTypeException extends ListenerStartupException {
  private static final long serialVersionUID = 1L;

  SharedBizTypeException(String problem, String action) {
    super(problem, action);
  }
}
