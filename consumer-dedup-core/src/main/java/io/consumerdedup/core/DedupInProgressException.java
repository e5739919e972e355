package io.consumerdedup.core;

import java.time.Instant;
import java.util.Optional;
import org.jspecify.annotations.Nullable;

/**
 * Another consumer holds a live lease on the key: retry the delivery later (it is neither done nor
 * dropped). Retryable. Also thrown for a record whose status a newer version of consumer-dedup
 * wrote ({@link DedupStatus#UNKNOWN}, as in a rolling upgrade): that version, or an operator, moves
 * it on.
 */
public class DedupInProgressException extends DedupException {
  private static final long serialVersionUID = 1L;

  private final String holder;
  private final @Nullable Instant leaseUntil;

  public DedupInProgressException(DedupKey key, DedupRecord existing, @Nullable String source) {
    super(message(existing), key, source, null);
    this.holder = existing.owner();
    this.leaseUntil = existing.leaseUntil().orElse(null);
  }

  private static String message(DedupRecord existing) {
    if (existing.status() == DedupStatus.UNKNOWN) {
      return "Key has the status '"
          + existing.storedStatus()
          + "', which this version of consumer-dedup does not know (a newer version sharing the"
          + " table wrote it); neither handled nor dead-lettered: retry later";
    }
    return "Key is being processed by "
        + existing.owner()
        + " (attempt "
        + existing.attempts()
        + ", lease until "
        + existing.leaseUntil().map(Instant::toString).orElse("?")
        + "); retry later";
  }

  /** The consumer instance holding the lease. */
  public String holder() {
    return holder;
  }

  /** When (database time) the holder's lease runs out unless it is renewed. */
  public Optional<Instant> leaseUntil() {
    return Optional.ofNullable(leaseUntil);
  }

  /** {@link Disposition#RETRY_LATER}: the holder finishes, or its lease runs out. */
  @Override
  public Disposition disposition() {
    return Disposition.RETRY_LATER;
  }
}
