package io.consumerdedup.core;

import io.consumerdedup.core.internal.FailureTexts;
import org.jspecify.annotations.Nullable;

/**
 * Wraps a checked exception thrown by a handler (runtime exceptions and errors propagate
 * unchanged). The record was marked FAILED before this was thrown; {@link #getCause()} is the
 * original.
 */
public class DedupHandlerException extends DedupException {
  private static final long serialVersionUID = 1L;

  /**
   * @param key the key, or null when the handler ran without dedup (a record without a key under
   *     {@code MissingKeyPolicy.PROCESS_WITHOUT_DEDUP})
   */
  public DedupHandlerException(@Nullable DedupKey key, @Nullable String source, Exception cause) {
    super("Handler failed: " + FailureTexts.describe(cause), key, source, cause);
  }

  /** {@link Disposition#HANDLER_FAILED}: the record is FAILED, and a retry may succeed. */
  @Override
  public Disposition disposition() {
    return Disposition.HANDLER_FAILED;
  }
}
