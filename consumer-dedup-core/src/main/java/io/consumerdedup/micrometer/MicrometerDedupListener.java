package io.consumerdedup.micrometer;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStoreException;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.TimeGauge;
import io.micrometer.core.instrument.Timer;
import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Publishes the engine's events to Micrometer (an optional dependency: use this class only when
 * micrometer-core is on the classpath).
 *
 * <ul>
 *   <li>{@value #OUTCOMES}: counter tagged {@code biz_type} and {@code outcome} (processed,
 *       duplicate, in_progress, conflict, failed, lease_lost, missing_key, and store_failed: a
 *       claim or an outcome that could not reach the dedup table, so its delivery waits)
 *   <li>{@value #CLAIM_TIMER}: timer of claim round trips, tagged {@code biz_type}
 *   <li>{@value #PURGED}: counter of records deleted by the retention purge
 *   <li>{@value #PURGE_BACKLOG}: gauge of expired records not purged yet, as the janitor last
 *       counted them among the oldest records (a floor when it reached its sample's size)
 *   <li>{@value #PURGE_OLDEST_EXPIRED}: time gauge, how long ago the oldest expired record not
 *       purged yet expired (0 when none is); above 3 janitor intervals the janitor is behind
 * </ul>
 *
 * Both backlog gauges read NaN while the backlog is unknown: the janitor's last count failed.
 */
public final class MicrometerDedupListener implements DedupListener {
  public static final String OUTCOMES = "consumer.dedup.outcomes";
  public static final String CLAIM_TIMER = "consumer.dedup.claim";
  public static final String PURGED = "consumer.dedup.purged";
  public static final String PURGE_BACKLOG = "consumer.dedup.purge.backlog";
  public static final String PURGE_OLDEST_EXPIRED = "consumer.dedup.purge.oldest.expired";

  /** What the backlog gauges hold while the backlog is unknown; they read it as NaN. */
  private static final long UNKNOWN = -1;

  private final AtomicLong backlogRows = new AtomicLong();
  private final AtomicLong oldestExpiredMillis = new AtomicLong();
  private final AtomicBoolean backlogGaugesRegistered = new AtomicBoolean();

  private final MeterRegistry registry;

  public MicrometerDedupListener(MeterRegistry registry) {
    this.registry = Objects.requireNonNull(registry, "registry");
  }

  private void count(String bizType, String outcome) {
    Counter.builder(OUTCOMES)
        .description("Deliveries handled by consumer-dedup, by outcome")
        .tag("biz_type", bizType)
        .tag("outcome", outcome)
        .register(registry)
        .increment();
  }

  @Override
  public void claimTimed(DedupKey key, Duration elapsed) {
    Timer.builder(CLAIM_TIMER)
        .description("Round trip of a dedup claim")
        .tag("biz_type", key.bizType())
        .register(registry)
        .record(elapsed);
  }

  @Override
  public void completed(DedupKey key, int attempt, Duration handlerTime) {
    count(key.bizType(), "processed");
  }

  @Override
  public void duplicate(DedupKey key, DedupRecord existing) {
    count(key.bizType(), "duplicate");
  }

  @Override
  public void inProgress(DedupKey key, DedupRecord existing) {
    count(key.bizType(), "in_progress");
  }

  @Override
  public void conflict(DedupKey key, DedupRecord existing) {
    count(key.bizType(), "conflict");
  }

  @Override
  public void failed(DedupKey key, int attempt, Throwable error) {
    count(key.bizType(), "failed");
  }

  @Override
  public void leaseLost(DedupKey key, int attempt) {
    count(key.bizType(), "lease_lost");
  }

  @Override
  public void storeFailed(DedupKey key, DedupStoreException error) {
    count(key.bizType(), "store_failed");
  }

  @Override
  public void keyMissing(String bizType, String source) {
    count(bizType, "missing_key");
  }

  @Override
  public void purged(int count) {
    Counter.builder(PURGED)
        .description("Dedup records deleted by the retention purge")
        .register(registry)
        .increment(count);
  }

  @Override
  public void purgeBacklog(long expiredRows, Duration oldestExpiredAge) {
    showBacklog(expiredRows, oldestExpiredAge.toMillis());
  }

  @Override
  public void purgeBacklogUnknown(RuntimeException error) {
    // NaN, not the last count nor 0: a janitor whose count keeps failing is not caught up.
    showBacklog(UNKNOWN, UNKNOWN);
  }

  private void showBacklog(long rows, long oldestMillis) {
    backlogRows.set(rows);
    oldestExpiredMillis.set(oldestMillis);
    // Registered at the first measurement: an application without a janitor shows no backlog.
    if (backlogGaugesRegistered.compareAndSet(false, true)) {
      Gauge.builder(PURGE_BACKLOG, backlogRows, MicrometerDedupListener::valueOrNaN)
          .description("Expired dedup records not purged yet, counted among the oldest")
          .baseUnit("records")
          .register(registry);
      TimeGauge.builder(
              PURGE_OLDEST_EXPIRED,
              oldestExpiredMillis,
              TimeUnit.MILLISECONDS,
              MicrometerDedupListener::valueOrNaN)
          .description("How long ago the oldest expired dedup record not purged yet expired")
          .register(registry);
    }
  }

  private static double valueOrNaN(AtomicLong gauge) {
    long value = gauge.get();
    return value == UNKNOWN ? Double.NaN : value;
  }
}
