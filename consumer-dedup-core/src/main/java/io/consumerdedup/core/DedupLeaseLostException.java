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
  private final @Nullable String releaseNote;

  public DedupLeaseLostException(
      DedupKey key, int attempt, String outcome, @Nullable String source) {
    this(key, attempt, outcome, source, null);
  }

  /**
   * @param releaseNote the note of the operator's release that ended the lease ({@code
   *     DedupAdmin.release}), as the key's record holds it; null if another consumer took the key
   *     over
   */
  public DedupLeaseLostException(
      DedupKey key,
      int attempt,
      String outcome,
      @Nullable String source,
      @Nullable String releaseNote) {
    super(
        releaseNote == null
            ? "Lease of attempt "
                + attempt
                + " was taken over by another consumer before "
                + outcome
                + " could be recorded; the new holder decides the outcome"
            : "Lease of attempt "
                + attempt
                + " was released by an operator before "
                + outcome
                + " could be recorded ("
                + releaseNote
                + "): nobody holds the key, which is FAILED, and its next delivery runs the"
                + " handler again",
        key,
        source,
        null);
    this.attempt = attempt;
    this.releaseNote = releaseNote;
  }

  /** The note of the operator's release that ended the lease, if an operator released it. */
  public java.util.Optional<String> releaseNote() {
    return java.util.Optional.ofNullable(releaseNote);
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
