package io.consumerdedup.test;

import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneId;
import java.time.ZoneOffset;
import java.util.Objects;

/**
 * A clock that stands still until a test moves it, for {@link InMemoryDedupStore}: a lease runs out
 * when the test says so, not after a sleep.
 *
 * <pre>{@code
 * TestClock clock = new TestClock();
 * InMemoryDedupStore store = new InMemoryDedupStore(clock);
 * ...
 * clock.advance(Duration.ofMinutes(5)); // every lease shorter than 5 minutes has expired
 * }</pre>
 */
public final class TestClock extends Clock {
  private volatile Instant now;
  private final ZoneId zone;

  /** A clock at the current time, in UTC. */
  public TestClock() {
    this(Instant.now(), ZoneOffset.UTC);
  }

  /** A clock at {@code start}, in {@code zone}. */
  public TestClock(Instant start, ZoneId zone) {
    this.now = Objects.requireNonNull(start, "start");
    this.zone = Objects.requireNonNull(zone, "zone");
  }

  /**
   * Moves the clock forward by {@code duration}.
   *
   * @throws IllegalArgumentException if the duration is negative: time does not run backwards
   */
  public synchronized void advance(Duration duration) {
    if (duration.isNegative()) {
      throw new IllegalArgumentException("duration must not be negative, was " + duration);
    }
    now = now.plus(duration);
  }

  @Override
  public Instant instant() {
    return now;
  }

  @Override
  public ZoneId getZone() {
    return zone;
  }

  @Override
  public Clock withZone(ZoneId zone) {
    return new SharedTime(this, zone);
  }

  /** This clock's time in another zone: advancing one advances both. */
  private static final class SharedTime extends Clock {
    private final TestClock time;
    private final ZoneId zone;

    SharedTime(TestClock time, ZoneId zone) {
      this.time = time;
      this.zone = zone;
    }

    @Override
    public Instant instant() {
      return time.instant();
    }

    @Override
    public ZoneId getZone() {
      return zone;
    }

    @Override
    public Clock withZone(ZoneId zone) {
      return new SharedTime(time, zone);
    }
  }
}
