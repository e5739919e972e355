package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import io.consumerdedup.testing.StoreFixture;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The application's {@link DedupListener} throws an {@code Error} (a metrics library's {@code
 * NoClassDefFoundError}, an {@code OutOfMemoryError}) as it is told how long a claim took: the
 * claim has committed by then, so the next delivery to this process must take it up, not be told
 * "in progress" by this process's own claim for a whole lease (5 minutes by default).
 */
class ClaimTimingListenerErrorTest {
  @RegisterExtension static final StoreFixture db = new StoreFixture("claimtiming", 4);

  private final AtomicBoolean broken = new AtomicBoolean(true);
  private final DedupListener metrics =
      new DedupListener() {
        @Override
        public void claimTimed(DedupKey key, Duration elapsed) {
          if (broken.getAndSet(false)) {
            throw new NoClassDefFoundError("io/metrics/Timer");
          }
        }
      };

  @Test
  void aClaimTimedThatThrowsAnErrorLeavesTheClaimToTheNextDelivery() {
    IdempotentExecutor executor =
        db.executor(IdempotentExecutor.builder(db.store()).listener(metrics));
    DedupKey key = DedupKey.of("payment", "timed-error");
    AtomicInteger runs = new AtomicInteger();

    Throwable first = catchThrowable(() -> executor.execute(key, runs::incrementAndGet));
    Throwable redelivery = catchThrowable(() -> executor.execute(key, runs::incrementAndGet));

    assertThat(first).isInstanceOf(NoClassDefFoundError.class);
    assertThat(redelivery).as("the redelivery, to the same process").isNull();
    assertThat(runs).as("handler runs").hasValue(1);
    assertThat(db.store().find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
  }

  @Test
  void aClaimTimedThatThrowsAnErrorLeavesAPollsClaimsToTheNextPoll() {
    IdempotentExecutor executor =
        db.executor(IdempotentExecutor.builder(db.store()).listener(metrics));
    List<IdempotentExecutor.Delivery> poll =
        List.of(
            new IdempotentExecutor.Delivery(DedupKey.of("payment", "poll-1"), null, "p-0@1"),
            new IdempotentExecutor.Delivery(DedupKey.of("payment", "poll-2"), null, "p-0@2"));

    Throwable first = catchThrowable(() -> executor.claimAll(poll));
    DedupClaims again = executor.claimAll(poll);
    Throwable held = catchThrowable(() -> again.get(0));

    assertThat(first).isInstanceOf(NoClassDefFoundError.class);
    assertThat(held).as("the next poll's claim of its first record").isNull();
    assertThat(again.get(1).isDuplicate()).isFalse();
    again.get(0).complete();
    again.get(1).complete();
  }
}
