package io.consumerdedup.core;

/** The state of a {@link DedupRecord}. */
public enum DedupStatus {
  /** A holder runs the handler under a lease; other deliveries are told "in progress". */
  PROCESSING,
  /** The handler completed; later deliveries of the key are duplicates while the record is kept. */
  SUCCESS,
  /** The handler threw; the next delivery of the key retries it. */
  FAILED
}
