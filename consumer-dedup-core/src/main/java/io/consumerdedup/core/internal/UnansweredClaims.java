package io.consumerdedup.core.internal;

import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.DedupKey;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Claims whose answer never arrived (the store gave up while the database was unreachable), by key:
 * the claim may have been committed, leaving the key PROCESSING under a live lease of ours. The
 * next claim of the key from this process sends the same claim id, so the store recognises the row
 * as ours instead of as another holder's lease that would block the key until it runs out. After a
 * lease the entry is useless (an expired lease is claimable anyway) and is dropped.
 *
 * <p>A remembered id is handed out once: it stands for one delivery attempt of one caller. Two
 * threads (two poll loops sharing the executor) that both sent it would both be told "yours" and
 * both run the handler; the second one gets a fresh id instead, and the store tells it "in
 * progress". A claim that goes unanswered again puts its id back.
 */
public final class UnansweredClaims {
  private static final int PRUNE_ABOVE = 1024;

  private final long leaseNanos;
  private final Map<DedupKey, Entry> entries = new ConcurrentHashMap<>();

  private record Entry(String claimId, long sentNanos) {}

  public UnansweredClaims(Duration lease) {
    this.leaseNanos = lease.toNanos();
  }

  /**
   * The claim id to send for {@code key}: that of its unanswered claim, taken so that no other
   * caller sends it too, else a fresh one.
   */
  public String takeClaimIdFor(DedupKey key) {
    Entry entry = entries.remove(key);
    return entry != null && fresh(entry, System.nanoTime())
        ? entry.claimId()
        : ClaimRequest.newClaimId();
  }

  /** The claim of {@code key} with {@code claimId}, sent at {@code sentNanos}, got no answer. */
  public void unanswered(DedupKey key, String claimId, long sentNanos) {
    if (entries.size() >= PRUNE_ABOVE) {
      long now = System.nanoTime();
      entries.values().removeIf(entry -> !fresh(entry, now));
    }
    entries.put(key, new Entry(claimId, sentNanos));
  }

  /**
   * The claim id taken for {@code key} ({@link #takeClaimIdFor}) at {@code takenNanos} was never
   * sent: remembered again, unless the key's claim went unanswered since. The time it was first
   * sent is not known any more; from when it was taken, it is kept at most that much longer, and
   * sent then it still names only this process's own claim.
   */
  public void unsent(DedupKey key, String claimId, long takenNanos) {
    entries.putIfAbsent(key, new Entry(claimId, takenNanos));
  }

  private boolean fresh(Entry entry, long now) {
    return now - entry.sentNanos() < leaseNanos;
  }
}
