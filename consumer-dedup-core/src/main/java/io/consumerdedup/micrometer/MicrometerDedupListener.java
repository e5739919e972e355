package io.consumerdedup.micrometer;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStoreException;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tag;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.TimeGauge;
import io.micrometer.core.instrument.Timer;
import java.time.Duration;
import java.util.List;
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
 *
 * <p>An application with a janitor on each of two dedup tables gives each janitor a listener with
 * tags of its own, such as {@code new MicrometerDedupListener(registry, Tags.of("table",
 * "orders_dedup"))}: the tags go on every meter. A gauge belongs to the first listener that
 * registers it, so a second listener whose backlog gauges would have the same name and tags is
 * refused with an {@link IllegalStateException} as it reports its backlog (the janitor logs it at
 * WARN), rather than have the registry show the first one's backlog as its own.
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
  private final Tags tags;

  public MicrometerDedupListener(MeterRegistry registry) {
    this(registry, Tags.empty());
  }

  /**
   * @param tags added to every meter, to tell this listener's meters from those of another on the
   *     same registry (a janitor and executors on another dedup table)
   */
  public MicrometerDedupListener(MeterRegistry registry, Iterable<Tag> tags) {
    this.registry = Objects.requireNonNull(registry, "registry");
    this.tags = Tags.of(Objects.requireNonNull(tags, "tags"));
  }

  private void count(String bizType, String outcome) {
    Counter.builder(OUTCOMES)
        .description("Deliveries handled by consumer-dedup, by outcome")
        .tags(tags)
        .tag("biz_type", bizType)
        .tag("outcome", outcome)
        .register(registry)
        .increment();
  }

  @Override
  public void claimTimed(DedupKey key, Duration elapsed) {
    Timer.builder(CLAIM_TIMER)
        .description("Round trip of a dedup claim")
        .tags(tags)
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
        .tags(tags)
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
    if (!backlogGaugesRegistered.get()) {
      registerBacklogGauges();
    }
  }

  private synchronized void registerBacklogGauges() {
    if (backlogGaugesRegistered.get()) {
      return;
    }
    // The registry hands back the gauge already registered under the same name and tags, bound
    // to the other listener's numbers: this listener's backlog would never be shown.
    for (String name : List.of(PURGE_BACKLOG, PURGE_OLDEST_EXPIRED)) {
      boolean taken =
          registry.find(name).meters().stream()
              .anyMatch(meter -> Tags.of(meter.getId().getTags()).equals(tags));
      if (taken) {
        throw new IllegalStateException(
            "The gauge "
                + name
                + (tags.stream().findAny().isPresent() ? " tagged " + tags : "")
                + " is already registered on this MeterRegistry by another"
                + " MicrometerDedupListener, so this listener's backlog would never be shown:"
                + " give the listener of each janitor tags of its own, such as new"
                + " MicrometerDedupListener(registry, Tags.of(\"table\", \"orders_dedup\"))");
      }
    }
    Gauge.builder(PURGE_BACKLOG, backlogRows, MicrometerDedupListener::valueOrNaN)
        .description("Expired dedup records not purged yet, counted among the oldest")
        .baseUnit("records")
        .tags(tags)
        .register(registry);
    TimeGauge.builder(
            PURGE_OLDEST_EXPIRED,
            oldestExpiredMillis,
            TimeUnit.MILLISECONDS,
            MicrometerDedupListener::valueOrNaN)
        .description("How long ago the oldest expired dedup record not purged yet expired")
        .tags(tags)
        .register(registry);
    backlogGaugesRegistered.set(true);
  }

  private static double valueOrNaN(AtomicLong gauge) {
    long value = gauge.get();
    return value == UNKNOWN ? Double.NaN : value;
  }
}
