package io.consumerdedup.kafka;

/** What to do with a record from which no business key can be derived. */
public enum MissingKeyPolicy {
  /**
   * Refuse it with {@link io.consumerdedup.core.DedupKeyMissingException} (not retryable: route it
   * to a dead-letter topic). The default: an unprotected payment is worse than a stopped one.
   */
  FAIL,
  /** Run the handler without protection; logged at WARN and counted as {@code missing_key}. */
  PROCESS_WITHOUT_DEDUP,
  /**
   * Use {@code topic-partition@offset} as the key: protects against redelivery of this record only;
   * counted as {@code missing_key}.
   */
  USE_COORDINATES
}
