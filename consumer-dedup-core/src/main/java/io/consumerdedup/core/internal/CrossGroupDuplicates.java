package io.consumerdedup.core.internal;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Spots duplicates whose SUCCESS another consumer group wrote. Each group of a topic gets every
 * record, so two listeners in different groups under one biz type (a billing and a points consumer
 * of the same payment event, both {@code "payment"}) apply each key once between them, not once
 * each: the second one silently skips every key the first one did. Warned once per biz type and
 * pair of groups, from the sources the store keeps, at the cost of two string scans on the
 * duplicate path.
 */
public final class CrossGroupDuplicates {
  private static final Logger log = LoggerFactory.getLogger(CrossGroupDuplicates.class);

  private final Set<String> warned = ConcurrentHashMap.newKeySet();

  /** A delivery from {@code source} is a duplicate of {@code existing}, a SUCCESS. */
  public void duplicate(DedupKey key, @Nullable String source, DedupRecord existing) {
    String ours = DeliverySources.groupOf(source);
    if (ours == null) {
      return;
    }
    String theirs = DeliverySources.groupOf(existing.source().orElse(null));
    if (theirs == null || theirs.equals(ours)) {
      return;
    }
    if (warned.add(key.bizType() + '\n' + theirs + '\n' + ours)) {
      log.warn(
          "Consumer group '{}' skipped {} as a duplicate of a SUCCESS written by consumer group"
              + " '{}' ({}): listeners in different groups share the biz type '{}', so each key is"
              + " applied by one of them only. Give each kind of action its own biz type (one per"
              + " listener that applies its own effect), unless '{}' replaced '{}' on purpose"
              + " (a renamed group). Logged once per biz type and pair of groups.",
          ours,
          key,
          theirs,
          existing.source().orElse(""),
          key.bizType(),
          ours,
          theirs);
    }
  }
}
