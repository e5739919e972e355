package io.consumerdedup.core.internal;

import io.consumerdedup.core.DedupKey;
import org.jspecify.annotations.Nullable;

/**
 * How a delivery's source names its consumer group: {@code payments-0@42 (group billing)}. The
 * Kafka adapters write it so; the store keeps the source of the claim that wrote a record, which is
 * how the engine knows which group wrote a SUCCESS. Logs name a delivery by its key and source.
 */
public final class DeliverySources {
  private static final String GROUP_PREFIX = " (group ";

  private DeliverySources() {}

  /** How logs name a delivery: its key, followed by {@code (source)} when the source is known. */
  public static String where(DedupKey key, @Nullable String source) {
    return source == null ? key.toString() : key + " (" + source + ")";
  }

  /** {@code where}, followed by {@code (group g)} when the group is known. */
  public static String withGroup(String where, @Nullable String groupId) {
    return groupId == null ? where : where + GROUP_PREFIX + groupId + ")";
  }

  /**
   * The consumer group that {@code source} names; null if it names none, or if it may have been cut
   * short when it was stored (its end, the group, may be missing or partial).
   */
  public static @Nullable String groupOf(@Nullable String source) {
    if (source == null
        || source.length() >= StoredText.MAX_SOURCE_LENGTH
        || !source.endsWith(")")) {
      return null;
    }
    int start = source.lastIndexOf(GROUP_PREFIX);
    return start < 0 ? null : source.substring(start + GROUP_PREFIX.length(), source.length() - 1);
  }
}
