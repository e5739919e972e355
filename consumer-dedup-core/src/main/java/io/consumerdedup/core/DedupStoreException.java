package io.consumerdedup.core;

import org.jspecify.annotations.Nullable;

/**
 * The dedup store failed; the message says what was not recorded. This class itself stands for a
 * failure that is not the delivery's fault and that an operator may have to fix (a missing table, a
 * permission, a database that is not supported): {@link Disposition#RETRY_LATER}, logged at ERROR,
 * so no record is dead-lettered or skipped because of it. Its subclasses are the two other kinds:
 * {@link DedupStoreUnavailableException} (the database could not be reached in time) and {@link
 * DedupStoreDataException} (the database refused this delivery's data).
 */
public class DedupStoreException extends DedupException {
  private static final long serialVersionUID = 1L;

  public DedupStoreException(
      String message, @Nullable DedupKey key, @Nullable String source, @Nullable Throwable cause) {
    super(message, key, source, cause);
  }

  /** {@link Disposition#RETRY_LATER}: the record waits until the store works again. */
  @Override
  public Disposition disposition() {
    return Disposition.RETRY_LATER;
  }

  /**
   * The same failure, naming where the delivery came from; {@code this} if it already names one or
   * {@code source} is null. Stores know the key but not the delivery; the engine adds it.
   */
  public DedupStoreException locatedAt(@Nullable String source) {
    if (source == null || source().isPresent()) {
      return this;
    }
    DedupStoreException located = relocated(source);
    located.setStackTrace(getStackTrace());
    return located;
  }

  DedupStoreException relocated(String source) {
    return new DedupStoreException(reason(), key().orElse(null), source, getCause());
  }
}
