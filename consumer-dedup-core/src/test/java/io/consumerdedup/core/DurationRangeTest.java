package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import io.consumerdedup.testing.StoreFixture;
import java.time.Duration;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Durations the builder takes must be ones the store can write and the executor can time: a value
 * outside that range is refused where it is set, rather than accepted and broken at every record.
 * On a real PostgreSQL, so that a value let through shows what it did.
 */
class DurationRangeTest {
  @RegisterExtension static final StoreFixture db = new StoreFixture("durations", 4);

  @Test
  void aSuccessRetentionKeptForEverIsRefusedInsteadOfLeavingEveryKeyUnrecorded() {
    DedupKey key = DedupKey.of("payment", "forever");
    AtomicInteger runs = new AtomicInteger();

    Throwable thrown =
        catchThrowable(
            () ->
                db.executor(
                        IdempotentExecutor.builder(db.store())
                            .successRetention(ChronoUnit.FOREVER.getDuration()))
                    .execute(key, runs::incrementAndGet));

    assertThat(runs)
        .as("handlers run whose SUCCESS the database could not hold (%s)", thrown)
        .hasValue(0);
    assertThat(thrown)
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageStartingWith("successRetention must be at most PT8760000H (")
        .hasMessageEndingWith("), was PT2562047788015215H30M7.999999999S");
  }

  @Test
  void retentionsBeyondTheDatabasesTimesAreRefusedWhereTheyAreSet() {
    // 300,000 years: PostgreSQL's interval overflows; MySQL's DATETIME ends in 9999.
    Duration tooLong = Duration.ofDays(365L * 300_000);
    DedupKey key = DedupKey.of("payment", "300k-years");
    AtomicInteger runs = new AtomicInteger();

    Throwable success =
        catchThrowable(
            () ->
                db.executor(IdempotentExecutor.builder(db.store()).successRetention(tooLong))
                    .execute(key, runs::incrementAndGet));
    Throwable failed =
        catchThrowable(
            () -> db.executor(IdempotentExecutor.builder(db.store()).failedRetention(tooLong)));

    assertThat(runs)
        .as("handlers run whose SUCCESS could not be written (%s)", success)
        .hasValue(0);
    assertThat(success).isInstanceOf(IllegalArgumentException.class);
    assertThat(failed)
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageStartingWith("failedRetention must be at most PT8760000H");
    assertThat(db.store().find(key)).as("no record left PROCESSING").isEmpty();
    // The longest one allowed is written and read back.
    DedupResult<Integer> longest =
        db.executor(
                IdempotentExecutor.builder(db.store())
                    .successRetention(Duration.ofDays(365_000))
                    .failedRetention(Duration.ofDays(365_000)))
            .execute(DedupKey.of("payment", "1000-years"), () -> 1);
    assertThat(longest.outcome()).isEqualTo(Outcome.PROCESSED);
  }

  @Test
  void aLeaseShorterThanAMillisecondIsRefusedInsteadOfLettingAnotherConsumerTakeTheKeyOver()
      throws Exception {
    DedupKey key = DedupKey.of("payment", "sub-millisecond");
    List<DedupClaim> holders = new ArrayList<>();

    Throwable thrown =
        catchThrowable(
            () -> {
              IdempotentExecutor first =
                  db.executor(
                      IdempotentExecutor.builder(db.store()).lease(Duration.ofNanos(900_000)));
              IdempotentExecutor second =
                  db.executor(
                      IdempotentExecutor.builder(db.store()).lease(Duration.ofNanos(900_000)));
              holders.add(first.claim(key, null, null));
              Thread.sleep(100); // its lease renewed all the while
              holders.add(second.claim(key, null, null));
            });

    assertThat(holders)
        .as("consumers holding the key at once, their handlers running side by side")
        .hasSizeLessThan(2);
    assertThat(thrown)
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage(
            "lease must be at least PT0.001S (leases are kept in whole milliseconds, and timed in"
                + " nanoseconds), was PT0.0009S");
  }

  @Test
  void leasesAndWaitsTooLongToTimeAreRefusedNotThrownAsAnOverflow() {
    Throwable lease =
        catchThrowable(
            () ->
                db.executor(
                    IdempotentExecutor.builder(db.store())
                        .lease(ChronoUnit.FOREVER.getDuration())));
    AtomicInteger runs = new AtomicInteger();
    Throwable wait =
        catchThrowable(
            () ->
                db.executor(
                        IdempotentExecutor.builder(db.store())
                            .inProgressPolicy(InProgressPolicy.WAIT)
                            .waitTimeout(ChronoUnit.FOREVER.getDuration()))
                    .execute(DedupKey.of("payment", "wait-forever"), runs::incrementAndGet));

    assertThat(lease)
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageStartingWith("lease must be at most PT876000H");
    assertThat(wait)
        .as("a claim under a wait timeout of ChronoUnit.FOREVER")
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageStartingWith("waitTimeout must be at most PT876000H");
  }
}
