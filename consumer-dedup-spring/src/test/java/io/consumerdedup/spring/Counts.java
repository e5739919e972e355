package io.consumerdedup.spring;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

/** How many times something happened, per key; safe across threads. */
final class Counts<T> {
  private final Map<T, AtomicInteger> counts = new ConcurrentHashMap<>();

  /** Counts one more for {@code key}, and returns its count now. */
  int count(T key) {
    return counts.computeIfAbsent(key, k -> new AtomicInteger()).incrementAndGet();
  }

  /** The count of {@code key}; 0 if never counted. */
  int of(T key) {
    AtomicInteger count = counts.get(key);
    return count == null ? 0 : count.get();
  }
}
