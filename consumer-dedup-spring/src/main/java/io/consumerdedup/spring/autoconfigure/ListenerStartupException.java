package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.core.DedupConfigurationException;

/**
 * An {@code @Idempotent} listener set up in a way consumer-dedup cannot protect, thrown at
 * start-up; the message is {@link #problem()} followed by {@link #action()}.
 */
public abstract class ListenerStartupException extends DedupConfigurationException {
  private static final long serialVersionUID = 1L;

  private final String problem;
  private final String action;

  ListenerStartupException(String problem, String action) {
    super(problem + ". " + action, null, null);
    this.problem = problem;
    this.action = action;
  }

  /** What is wrong, naming the listeners concerned. */
  public String problem() {
    return problem;
  }

  /** What to change. */
  public String action() {
    return action;
  }
}
