package io.consumerdedup.examples;

import java.time.Duration;

/**
 * The timings of the demo: short enough to watch, long enough to be believable; {@link #fast()} for
 * the smoke test.
 *
 * @param lease the dedup lease of the payment consumers: short, so that a dead consumer's key is
 *     taken over within seconds (production: minutes, longer than {@code max.poll.interval.ms})
 * @param retryBackoff the wait before a failed or in-progress record is delivered again
 * @param zombieMaxPollInterval {@code max.poll.interval.ms} of the zombie scenario's consumers
 * @param zombieBankLatency how long the zombie's bank call takes: longer than the poll interval
 * @param zombieLease the dedup lease in the zombie scenario: longer than the poll interval, and
 *     renewed while the slow handler runs
 * @param runTimeout the longest a consumer may take to work through a run's records
 */
public record DemoSettings(
    Duration lease,
    Duration retryBackoff,
    Duration zombieMaxPollInterval,
    Duration zombieBankLatency,
    Duration zombieLease,
    Duration runTimeout) {

  public static DemoSettings standard() {
    return new DemoSettings(
        Duration.ofSeconds(3),
        Duration.ofMillis(500),
        Duration.ofSeconds(4),
        Duration.ofSeconds(8),
        Duration.ofSeconds(6),
        Duration.ofSeconds(60));
  }

  public static DemoSettings fast() {
    return new DemoSettings(
        Duration.ofSeconds(2),
        Duration.ofMillis(100),
        Duration.ofSeconds(3),
        Duration.ofSeconds(5),
        Duration.ofSeconds(4),
        Duration.ofSeconds(45));
  }
}
