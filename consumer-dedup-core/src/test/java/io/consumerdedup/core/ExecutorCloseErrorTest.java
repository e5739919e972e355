package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import io.consumerdedup.testing.InterceptedStore;
import io.consumerdedup.testing.StoreFixture;
import io.consumerdedup.testing.ThrowingLog;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * An {@code Error} (an appender out of memory as it formats the ERROR of an outcome given up) as
 * the executor closes. It skipped the stopping of the lease renewal: the closed executor went on
 * renewing the leases of its keys for as long as the process ran, each of them "in progress" for
 * every other consumer.
 */
class ExecutorCloseErrorTest {
  private static final Duration LEASE = Duration.ofSeconds(1);

  @RegisterExtension static final StoreFixture db = new StoreFixture("closeerror", 4);

  @Test
  void anErrorAsTheCloseGivesUpAnOutcomeStillStopsTheRenewals() throws InterruptedException {
    AtomicBoolean refuseSuccess = new AtomicBoolean(true);
    DedupStore store =
        InterceptedStore.before(
            db.store(),
            (method, args) -> {
              if (method.getName().equals("complete") && refuseSuccess.get()) {
                throw new DedupStoreException("Connection refused", null, null, null);
              }
            });
    IdempotentExecutor executor =
        db.executor(
            IdempotentExecutor.builder(store).lease(LEASE).renewalInterval(Duration.ofMillis(200)));
    DedupKey key = DedupKey.of("payment", "CLOSE-1");
    DedupClaim claim = executor.claim(key, null, "payments-0@51");
    assertThat(catchThrowable(claim::complete)).isInstanceOf(DedupStoreUnavailableException.class);

    Throwable closing;
    try (ThrowingLog givingUp =
        ThrowingLog.on(
            "io.consumerdedup.core.internal.PendingOutcomes",
            "Closing with the",
            () -> new OutOfMemoryError("Java heap space, formatting the ERROR"))) {
      closing = catchThrowable(executor::close);
      assertThat(givingUp.threw()).as("ERROR lines that threw").isPositive();
    }
    assertThat(closing).as("what close() threw").isInstanceOf(OutOfMemoryError.class);
    refuseSuccess.set(false);
    Thread.sleep(3 * LEASE.toMillis()); // longer than a lease: only a renewal still holds the key

    IdempotentExecutor rival =
        db.executor(
            IdempotentExecutor.builder(db.store())
                .lease(LEASE)
                .renewalInterval(Duration.ofMillis(200)));
    Throwable refused = catchThrowable(() -> rival.claim(key, null, "payments-0@51").complete());
    assertThat(refused)
        .as("another consumer's claim, three leases after the executor closed")
        .isNull();
  }
}
