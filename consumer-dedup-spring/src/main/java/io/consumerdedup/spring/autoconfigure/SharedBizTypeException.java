package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.core.DedupConfigurationException;

/**
 * {@code @Idempotent} listeners of different consumer groups share a biz type that {@code
 * consumer-dedup.shared-biz-types} does not list: each group would skip the keys the other applied.
 * Thrown at start-up; the message is {@link #problem()} followed by {@link #action()}.
 */
public final class SharedBizTypeException extends DedupConfigurationException {
  private static final long serialVersionUID = 1L;

  private final String problem;
  private final String action;

  SharedBizTypeException(String problem, String action) {
    super(problem + ". " + action, null, null);
    this.problem = problem;
    this.action = action;
  }

  /** The two listeners, their groups and the biz type they share. */
  public String problem() {
    return problem;
  }

  /** What to change. */
  public String action() {
    return action;
  }
}
