package io.consumerdedup.core;

import org.jspecify.annotations.Nullable;

/**
 * What a Kafka adapter does with a delivery whose processing threw: the one answer that every
 * adapter ({@code DedupPollLoop}, the Spring error handling, your own loop) uses, so a record is
 * never skipped by one path and retried by another. Consumer-dedup's exceptions answer for
 * themselves ({@link DedupException#disposition()}); anything else is the handler's failure.
 */
public enum Disposition {

  /**
   * Try the delivery again later, as often as it takes, without counting an attempt and never
   * dead-lettering it: another consumer holds the key ({@link DedupInProgressException}), the store
   * cannot be reached ({@link DedupStoreUnavailableException}), or the outcome of a handler that
   * ran could not be recorded. Nothing may be committed past the record meanwhile; other partitions
   * keep moving.
   */
  RETRY_LATER,

  /**
   * Dead-letter the delivery now: a redelivery carries the same data, so retrying cannot help (a
   * missing or malformed key, a payload conflict, a record that cannot be deserialized, data the
   * store refuses), or the handler has failed on every attempt allowed ({@link
   * DedupAttemptsExhaustedException}).
   */
  DEAD_LETTER,

  /**
   * The handler failed (its record is FAILED in the table): retry it up to the adapter's limit of
   * attempts, then dead-letter it.
   */
  HANDLER_FAILED;

  /**
   * The disposition of {@code error}: that of the first consumer-dedup exception on its cause chain
   * (adapters such as spring-kafka wrap the listener's exception), else {@link #HANDLER_FAILED}.
   */
  public static Disposition of(Throwable error) {
    DedupException dedup = firstDedupException(error);
    return dedup == null ? HANDLER_FAILED : dedup.disposition();
  }

  /** The first consumer-dedup exception on {@code error}'s cause chain, the one that answers. */
  static @Nullable DedupException firstDedupException(Throwable error) {
    int depth = 0;
    for (Throwable current = error;
        current != null && depth < 32;
        current = current.getCause(), depth++) {
      if (current instanceof DedupException dedup) {
        return dedup;
      }
    }
    return null;
  }
}
