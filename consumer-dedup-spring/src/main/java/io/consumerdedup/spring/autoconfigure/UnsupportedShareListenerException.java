package io.consumerdedup.spring.autoconfigure;

/**
 * An {@code @Idempotent} listener runs in a share-group container ({@code
 * ShareKafkaListenerContainerFactory}), which consumer-dedup cannot protect on this spring-kafka.
 * Thrown at start-up; the message is {@link #problem()} (the listener, its container factory, and
 * why it cannot be protected) followed by {@link #action()}.
 */
public final class UnsupportedShareListenerException extends ListenerStartupException {
  private static final long serialVersionUID = 1L;

  UnsupportedShareListenerException(String problem, String action) {
    super(problem, action);
  }
}
