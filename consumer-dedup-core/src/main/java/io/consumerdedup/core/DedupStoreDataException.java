package io.consumerdedup.core;

import org.jspecify.annotations.Nullable;

/**
 * The database refused the data of this delivery (SQL state class 22, data exception, or 23,
 * integrity constraint violation): a redelivery would carry the same data, so retrying cannot help.
 * {@link Disposition#DEAD_LETTER}.
 */
public class DedupStoreDataException extends DedupStoreException {
  private static final long serialVersionUID = 1L;

  public DedupStoreDataException(
      String message, @Nullable DedupKey key, @Nullable String source, @Nullable Throwable cause) {
    super(message, key, source, cause);
  }

  /** {@link Disposition#DEAD_LETTER}: the same data would be refused again. */
  @Override
  public Disposition disposition() {
    return Disposition.DEAD_LETTER;
  }

  @Override
  DedupStoreException relocated(String source) {
    return new DedupStoreDataException(reason(), key().orElse(null), source, getCause());
  }
}
