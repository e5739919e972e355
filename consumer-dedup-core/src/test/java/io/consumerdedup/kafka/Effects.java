package io.consumerdedup.kafka;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

/** The side effects a user would notice: how many times each business action was applied. */
final class Effects {
  private final Map<String, AtomicInteger> applied = new ConcurrentHashMap<>();

  void apply(String businessKey) {
    applied.computeIfAbsent(businessKey, key -> new AtomicInteger()).incrementAndGet();
  }

  int count(String businessKey) {
    AtomicInteger count = applied.get(businessKey);
    return count == null ? 0 : count.get();
  }

  /** Every key applied so far, with its count. */
  Map<String, Integer> all() {
    Map<String, Integer> snapshot = new java.util.TreeMap<>();
    applied.forEach((key, count) -> snapshot.put(key, count.get()));
    return snapshot;
  }
}
