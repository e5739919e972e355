package io.consumerdedup.core;

import org.jspecify.annotations.Nullable;

/**
 * The dedup store could not be reached, or did not answer in time, after its retries: the
 * connection was refused or lost, a statement or socket timed out, the server was shutting down or
 * out of connections, or a serialization failure or deadlock persisted. {@link
 * Disposition#RETRY_LATER}: the delivery waits and is tried again once the database answers.
 */
public class DedupStoreUnavailableException extends DedupStoreException {
  private static final long serialVersionUID = 1L;

  public DedupStoreUnavailableException(
      String message, @Nullable DedupKey key, @Nullable String source, @Nullable Throwable cause) {
    super(message, key, source, cause);
  }

  @Override
  DedupStoreException relocated(String source) {
    return new DedupStoreUnavailableException(reason(), key().orElse(null), source, getCause());
  }
}
