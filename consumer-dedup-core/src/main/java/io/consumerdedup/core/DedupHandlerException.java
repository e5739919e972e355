package io.consumerdedup.core;

import org.jspecify.annotations.Nullable;

/**
 * Wraps a checked exception thrown by a handler (runtime exceptions and errors propagate
 * unchanged). The record was marked FAILED before this was thrown; {@link #getCause()} is the
 * original.
 */
public class DedupHandlerException extends DedupException {
  private static final long serialVersionUID = 1L;

  public DedupHandlerException(DedupKey key, @Nullable String source, Exception cause) {
    super("Handler failed: " + cause, key, source, cause);
  }
}
