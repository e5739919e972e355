package io.consumerdedup.jdbc;

import java.time.Duration;
import java.util.Optional;
import org.jspecify.annotations.Nullable;

/**
 * What the retention purge has left to do, as a {@link DedupJanitor} measured it at the start of a
 * run: the expired rows among the oldest {@value
 * io.consumerdedup.jdbc.internal.PurgeSql#BACKLOG_SAMPLE} by creation (the end the purge works
 * from; {@link #atLeast()} when all of those are expired, so there may be more), and how long ago
 * the first of them expired.
 *
 * @param expiredRows expired rows not purged yet, counted among the oldest rows
 * @param atLeast whether the count reached the sample's size: the backlog is at least that
 * @param oldestExpiredAge how long ago the oldest of them expired; null when none is expired
 * @param behind whether the purge is behind: the oldest expired row expired longer ago than {@link
 *     DedupJanitor#BEHIND_AFTER_INTERVALS} intervals between runs
 */
public record PurgeBacklog(
    long expiredRows, boolean atLeast, @Nullable Duration oldestExpiredAge, boolean behind) {

  /** How long ago the oldest expired row expired, if any is left. */
  public Optional<Duration> oldestExpired() {
    return Optional.ofNullable(oldestExpiredAge);
  }
}
