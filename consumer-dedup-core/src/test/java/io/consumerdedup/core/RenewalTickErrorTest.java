package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.consumerdedup.core.internal.FaultPoints;
import io.consumerdedup.testing.StoreFixture;
import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * An {@code Error} (an {@code OutOfMemoryError} as the lease timer allocates) strikes the timer
 * thread once, as it is about to start a renewal of a running handler's lease. The timer runs
 * renewals as periodic tasks, and a periodic task that throws is never run again: the renewing must
 * survive it, or a slow but live handler loses its key to another consumer, which runs the handler
 * beside it.
 */
class RenewalTickErrorTest {
  private static final Duration LEASE = Duration.ofMillis(1500);

  @RegisterExtension static final StoreFixture db = new StoreFixture("renewaltick", 4);

  @AfterEach
  void removeHook() {
    FaultPoints.install(null);
  }

  @Test
  void anErrorOnTheLeaseTimerOnceDoesNotLetAnotherConsumerTakeOverALiveHandlersKey()
      throws Exception {
    DedupKey key = DedupKey.of("payment", "ORD-tick-1");
    IdempotentExecutor holder =
        db.executor(IdempotentExecutor.builder(db.store()).ownerId("holder").lease(LEASE));
    IdempotentExecutor other =
        db.executor(IdempotentExecutor.builder(db.store()).ownerId("other").lease(LEASE));
    AtomicBoolean struck = new AtomicBoolean();
    FaultPoints.install(
        point -> {
          if (point == FaultPoints.Point.RENEWAL_DUE && struck.compareAndSet(false, true)) {
            throw new OutOfMemoryError("Java heap space");
          }
        });

    AtomicInteger charges = new AtomicInteger();
    CountDownLatch running = new CountDownLatch(1);
    CountDownLatch mayEnd = new CountDownLatch(1);
    Thread slowHandler =
        new Thread(
            () ->
                holder.execute(
                    key,
                    () -> {
                      charges.incrementAndGet();
                      running.countDown();
                      mayEnd.await(20, TimeUnit.SECONDS);
                      return null;
                    }));
    slowHandler.start();
    assertThat(running.await(10, TimeUnit.SECONDS)).isTrue();

    // Three leases: renewed every half second, the live handler never lets its lease lapse.
    Thread.sleep(3 * LEASE.toMillis());
    assertThat(struck).as("the timer met the Error").isTrue();

    assertThatThrownBy(() -> other.execute(key, charges::incrementAndGet))
        .as("another consumer's delivery while the holder's handler still runs")
        .isInstanceOf(DedupInProgressException.class);
    mayEnd.countDown();
    slowHandler.join(10_000);
    assertThat(charges).as("charges").hasValue(1);
    assertThat(db.store().find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
  }
}
