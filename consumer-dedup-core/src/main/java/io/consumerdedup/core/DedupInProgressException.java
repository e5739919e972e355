package io.consumerdedup.core;

import java.time.Instant;
import java.util.Optional;
import org.jspecify.annotations.Nullable;

/**
 * Another consumer holds a live lease on the key: retry the delivery later (it is neither done nor
 * dropped). Retryable.
 */
public class DedupInProgressException extends DedupException {
  private static final long serialVersionUID = 1L;

  private final String holder;
  private final @Nullable Instant leaseUntil;

  public DedupInProgressException(DedupKey key, DedupRecord existing, @Nullable String source) {
    super(
        "Key is being processed by "
            + existing.owner()
            + " (attempt "
            + existing.attempts()
            + ", lease until "
            + existing.leaseUntil().map(Instant::toString).orElse("?")
            + "); retry later",
        key,
        source,
        null);
    this.holder = existing.owner();
    this.leaseUntil = existing.leaseUntil().orElse(null);
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
