package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.core.DedupConfigurationException;

/**
 * An {@code @Idempotent} listener runs in a share-group container ({@code
 * ShareKafkaListenerContainerFactory}), which consumer-dedup cannot protect on this spring-kafka.
 * Thrown at start-up; the message is {@link #problem()} followed by {@link #action()}.
 */
public final class UnsupportedShareListenerException extends DedupConfigurationException {
  private static final long serialVersionUID = 1L;

  private final String problem;
  private final String action;

  UnsupportedShareListenerException(String problem, String action) {
    super(problem + ". " + action, null, null);
    this.problem = problem;
    this.action = action;
  }

  /** The listener, its container factory, and why it cannot be protected. */
  public String problem() {
    return problem;
  }

  /** What to change. */
  public String action() {
    return action;
  }
}
