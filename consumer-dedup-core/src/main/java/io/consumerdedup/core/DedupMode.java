package io.consumerdedup.core;

/** How the dedup record relates to the handler's own transaction. */
public enum DedupMode {
  /**
   * The default. The key is claimed in its own short transaction before the handler runs (status
   * PROCESSING, under a lease) and marked SUCCESS or FAILED after it. Fits any side effect (an HTTP
   * call, another database, a message). One window remains: a crash after the side effect and
   * before SUCCESS is written runs the handler again once the lease expires.
   */
  SEPARATE,
  /**
   * The dedup record is inserted, as SUCCESS, in the transaction the caller already has open on the
   * dedup table's database, and commits or rolls back with the handler's own writes: exactly-once
   * effects on that database, no PROCESSING state, no window. A concurrent copy waits on the unique
   * key, then sees the outcome. Requires an open transaction on the store's connection.
   */
  TRANSACTIONAL
}
