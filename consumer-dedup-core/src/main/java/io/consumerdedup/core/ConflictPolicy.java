package io.consumerdedup.core;

/**
 * What the executor does when a key arrives with a payload fingerprint other than the stored one.
 */
public enum ConflictPolicy {
  /** Throw {@link DedupKeyConflictException}; the handler does not run. */
  THROW,
  /** Treat the delivery as a duplicate of the stored action; the handler does not run. */
  TREAT_AS_DUPLICATE
}
