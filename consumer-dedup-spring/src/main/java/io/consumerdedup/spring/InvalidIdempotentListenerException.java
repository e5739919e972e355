package io.consumerdedup.spring;

import org.jspecify.annotations.Nullable;

/**
 * An {@link Idempotent} listener that consumer-dedup refuses at start-up: a malformed annotation, a
 * key expression that cannot give a key, or a listener shape it cannot protect. The message names
 * the method (and its bean), says what is wrong and what to write instead; Spring Boot shows the
 * two parts as the failure's description and action.
 */
public final class InvalidIdempotentListenerException extends IllegalStateException {
  private static final long serialVersionUID = 1L;

  private final String listener;
  private final @Nullable String beanName;
  private final String problem;
  private final String action;

  InvalidIdempotentListenerException(
      String listener,
      @Nullable String beanName,
      String problem,
      String action,
      @Nullable Throwable cause) {
    super(description(listener, beanName, problem) + ". " + action, cause);
    this.listener = listener;
    this.beanName = beanName;
    this.problem = problem;
    this.action = action;
  }

  private static String description(String listener, @Nullable String beanName, String problem) {
    return "@Idempotent on "
        + listener
        + (beanName == null ? "" : " (bean '" + beanName + "')")
        + ": "
        + problem;
  }

  /** The message without the action: the listener, its bean and what is wrong. */
  public String description() {
    return description(listener, beanName, problem);
  }

  /** The listener method, as {@code com.example.Orders#place}. */
  public String listener() {
    return listener;
  }

  /** The name of the bean whose method it is, when known. */
  public @Nullable String beanName() {
    return beanName;
  }

  /** What is wrong, without the method's name. */
  public String problem() {
    return problem;
  }

  /** What to write or do instead. */
  public String action() {
    return action;
  }
}
