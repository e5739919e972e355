package io.consumerdedup.core.internal;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupExecutorClosedException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.testing.StoreFixture;
import io.consumerdedup.testing.ThrowingLog;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.Delayed;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.IntStream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The executor closes with outcomes still on their way, and giving one of them up throws an {@code
 * Error} (an appender out of memory as it formats its ERROR line). The close stopped at that
 * outcome: the ones after it were neither said at ERROR to be not recorded nor failed, and a caller
 * waiting on their futures (an offset commit waiting for a SUCCESS) waited for good.
 */
class PendingOutcomesGiveUpErrorTest {
  @RegisterExtension static final StoreFixture db = new StoreFixture("giveup_error", 2);

  private static final Duration LEASE = Duration.ofMinutes(1);
  private static final Duration RETENTION = Duration.ofDays(1);

  private final LeaseRenewer renewer =
      new LeaseRenewer(db.store(), LEASE, Duration.ofSeconds(20), DedupListener.NOOP);

  @AfterEach
  void stop() {
    renewer.close();
  }

  @Test
  void everyOutcomeIsGivenUpWhateverGivingUpTheOneBeforeThrew() {
    PendingOutcomes pending =
        new PendingOutcomes(
            db.store(), DedupListener.NOOP, renewer, RETENTION, RETENTION, Duration.ofMillis(200));
    // Noted as on their way, as a SUCCESS mark is while the claim that carries it is sent.
    List<PendingOutcome> onTheirWay =
        IntStream.range(0, 3).mapToObj(i -> successOf("GIVE-UP-" + i)).toList();
    onTheirWay.forEach(pending::add);

    Throwable closing;
    try (ThrowingLog givingUp =
        ThrowingLog.on(
            PendingOutcomes.class.getName(),
            "Closing with the",
            () -> new OutOfMemoryError("Java heap space, formatting the ERROR"))) {
      pending.stopKeeping();
      closing = catchThrowable(() -> pending.giveUp(List.of()));
      for (PendingOutcome outcome : onTheirWay) {
        assertThat(outcome.written.isDone())
            .as("[what a caller waits on] the future of %s completed", outcome.key)
            .isTrue();
        assertThat(outcome.written)
            .failsWithin(Duration.ZERO)
            .withThrowableThat()
            .withCauseInstanceOf(DedupExecutorClosedException.class);
      }
      assertThat(givingUp.threw())
          .as("ERROR lines tried, one per outcome given up")
          .isEqualTo(onTheirWay.size());
    }

    assertThat(closing).as("what the close threw").isInstanceOf(OutOfMemoryError.class);
    assertThat(pending.unrecorded()).as("outcomes still listed after the close").isEmpty();
  }

  /**
   * Cancelling an outcome's background retry throws (an {@code OutOfMemoryError} in the timer's
   * queue): the close went on to the next outcome with this one neither given up nor taken, its
   * future incomplete, and whoever waited on it (an offset commit) waited for good.
   */
  @Test
  void anOutcomeWhoseRetryCannotBeCancelledIsGivenUpAllTheSame() {
    PendingOutcomes pending =
        new PendingOutcomes(
            db.store(), DedupListener.NOOP, renewer, RETENTION, RETENTION, Duration.ofMillis(200));
    PendingOutcome outcome = successOf("CANCEL-FAILS");
    pending.add(outcome);
    AtomicInteger cancels = new AtomicInteger();
    outcome.retries = new UncancellableRetry(cancels);

    pending.stopKeeping();
    Throwable closing = catchThrowable(() -> pending.giveUp(List.of()));

    assertThat(cancels).as("cancelling the retry tried").hasValue(1);
    assertThat(outcome.written.isDone())
        .as("[what a caller waits on] the future of %s completed", outcome.key)
        .isTrue();
    assertThat(outcome.written)
        .failsWithin(Duration.ZERO)
        .withThrowableThat()
        .withCauseInstanceOf(DedupExecutorClosedException.class);
    assertThat(outcome.retrying).as("taken: no retry of it starts any more").isTrue();
    assertThat(closing).as("what the close threw").isInstanceOf(OutOfMemoryError.class);
  }

  /** A scheduled retry whose cancel throws, as the timer's queue does out of memory. */
  private static final class UncancellableRetry implements ScheduledFuture<Object> {
    private final AtomicInteger cancels;

    UncancellableRetry(AtomicInteger cancels) {
      this.cancels = cancels;
    }

    @Override
    public boolean cancel(boolean mayInterruptIfRunning) {
      cancels.incrementAndGet();
      throw new OutOfMemoryError("Java heap space");
    }

    @Override
    public long getDelay(TimeUnit unit) {
      return 0;
    }

    @Override
    public int compareTo(Delayed other) {
      return 0;
    }

    @Override
    public boolean isCancelled() {
      return false;
    }

    @Override
    public boolean isDone() {
      return false;
    }

    @Override
    public Object get() {
      throw new UnsupportedOperationException();
    }

    @Override
    public Object get(long timeout, TimeUnit unit) {
      throw new UnsupportedOperationException();
    }
  }

  private PendingOutcome successOf(String bizKey) {
    DedupKey key = DedupKey.of("payment", bizKey);
    long sent = System.nanoTime();
    ClaimResult.Claimed claim =
        (ClaimResult.Claimed)
            db.store().claim(new ClaimRequest(key, "give-up-test", LEASE, RETENTION, null, null));
    return PendingOutcome.success(
        key, claim.token(), null, renewer.start(claim, sent), Duration.ZERO);
  }
}
