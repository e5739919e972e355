package io.consumerdedup.core.internal;

import io.consumerdedup.core.DedupKey;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReferenceArray;

/**
 * The keys an executor claimed last (at most {@link #CAPACITY}, the oldest forgotten first), with
 * the attempt it held. A claim that the store answers with a new record (attempt 1) for a key still
 * remembered here found the key's record gone: it vanished (a failover to a standby that had not
 * received it, an operator's DELETE, a purge), and the handler is about to run again for a key this
 * process handled a moment ago. Only this process's own claims are remembered, so the check costs a
 * map update per claim and no round trip; the memory advances with claims only, so the keys held
 * when the database went away are still remembered when it answers again.
 */
public final class RecentClaims {
  static final int CAPACITY = 4096;

  private final Map<DedupKey, Integer> attempts = new ConcurrentHashMap<>();
  private final AtomicReferenceArray<DedupKey> order = new AtomicReferenceArray<>(CAPACITY);
  private final AtomicInteger next = new AtomicInteger();

  /**
   * Records that this process holds attempt {@code attempt} of {@code key}.
   *
   * @return the attempt of the key this process held before, 0 if none is remembered
   */
  public int claimed(DedupKey key, int attempt) {
    Integer before = attempts.put(key, attempt);
    if (before == null) {
      DedupKey oldest = order.getAndSet(Math.floorMod(next.getAndIncrement(), CAPACITY), key);
      if (oldest != null && !oldest.equals(key)) {
        attempts.remove(oldest);
      }
    }
    return before == null ? 0 : before;
  }

  /**
   * The claim of {@code key} was given back (its handler never ran): the key's next claim may
   * create its record anew without anything having vanished.
   */
  public void released(DedupKey key) {
    attempts.remove(key);
  }
}
