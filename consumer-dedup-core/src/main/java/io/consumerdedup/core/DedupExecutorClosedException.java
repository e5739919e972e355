package io.consumerdedup.core;

import org.jspecify.annotations.Nullable;

/**
 * The {@link IdempotentExecutor} was closed (the application is shutting down) while a consumer
 * still used it: a key cannot be claimed, or a handler's SUCCESS could not be written before the
 * executor stopped. {@link Disposition#RETRY_LATER}: the delivery is neither failed nor
 * dead-lettered, and a consumer with a running executor handles it (a duplicate, if its SUCCESS was
 * written after all).
 */
public class DedupExecutorClosedException extends DedupException {
  private static final long serialVersionUID = 1L;

  public DedupExecutorClosedException(
      String reason, @Nullable DedupKey key, @Nullable String source, @Nullable Throwable cause) {
    super(reason, key, source, cause);
  }

  /** {@link Disposition#RETRY_LATER}: the record waits for a consumer whose executor runs. */
  @Override
  public Disposition disposition() {
    return Disposition.RETRY_LATER;
  }
}
