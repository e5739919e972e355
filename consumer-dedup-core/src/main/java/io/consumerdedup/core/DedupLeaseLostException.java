package io.consumerdedup.core;

import org.jspecify.annotations.Nullable;

/**
 * The handler ran, but its outcome was not recorded because another consumer took the key over
 * first: this holder's lease ran out (a pause longer than the lease, a renewal that could not reach
 * the database) and the new holder's record must not be overwritten. The new holder decides the
 * key's fate; its handler may apply the action a second time, which is why the lease should be
 * longer than any pause you would not call a crash. {@link Disposition#RETRY_LATER}: the delivery
 * comes back and then finds the key done (a duplicate), in progress, or retryable.
 */
public class DedupLeaseLostException extends DedupException {
  private static final long serialVersionUID = 1L;

  private final int attempt;

  public DedupLeaseLostException(
      DedupKey key, int attempt, String outcome, @Nullable String source) {
    super(
        "Lease of attempt "
            + attempt
            + " was taken over by another consumer before "
            + outcome
            + " could be recorded; the new holder decides the outcome",
        key,
        source,
        null);
    this.attempt = attempt;
  }

  /** The attempt (fencing token) whose lease was lost. */
  public int attempt() {
    return attempt;
  }

  @Override
  public Disposition disposition() {
    return Disposition.RETRY_LATER;
  }
}
