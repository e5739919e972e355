package io.consumerdedup.core.internal;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.testing.InterceptedStore;
import io.consumerdedup.testing.StoreFixture;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * An outcome that could not be written is kept for the background retry, and scheduling that retry
 * meets an {@code Error} ("unable to create native thread" as the timer starts, an {@code
 * OutOfMemoryError}). The outcome stayed listed as on its way though nothing would ever write it:
 * its claim took it for handed over and was never ended again, and its lease was renewed for the
 * executor's life, the key "in progress" for every other consumer.
 */
class KeptOutcomeScheduleErrorTest {
  @RegisterExtension static final StoreFixture db = new StoreFixture("keptschedule", 4);

  private static final Duration LEASE = Duration.ofSeconds(1);
  private static final Duration INTERVAL = Duration.ofMillis(200);
  private static final Duration RETENTION = Duration.ofDays(1);

  private LeaseRenewer renewals;
  private LeaseRenewer noTimer;
  private Outcomes outcomes;

  @BeforeEach
  void start() {
    renewals = new LeaseRenewer(db.store(), LEASE, INTERVAL, DedupListener.NOOP);
    ThreadFactory noThreads =
        running -> {
          throw new OutOfMemoryError("unable to create native thread: possibly out of memory");
        };
    noTimer = new LeaseRenewer(db.store(), LEASE, INTERVAL, DedupListener.NOOP, noThreads);
    DedupStore refusingOutcomes =
        InterceptedStore.before(
            db.store(),
            (method, args) -> {
              if (method.getName().startsWith("complete")) {
                throw new DedupStoreException("Connection refused", null, null, null);
              }
            });
    outcomes =
        new Outcomes(refusingOutcomes, DedupListener.NOOP, noTimer, RETENTION, RETENTION, INTERVAL);
  }

  @AfterEach
  void stop() {
    outcomes.close();
    noTimer.close();
    renewals.close();
  }

  @Test
  void aSuccessWhoseRetryCannotBeScheduledIsNotTakenForOnItsWay() {
    DedupKey key = DedupKey.of("payment", "KS-1");
    ClaimResult.Claimed claim = claim(key, "test-owner");
    LeaseRenewer.Renewal renewal = renewals.start(claim, System.nanoTime());

    Throwable thrown =
        catchThrowable(() -> outcomes.complete(key, claim.token(), null, renewal, Duration.ZERO));

    assertThat(thrown).as("what writing SUCCESS threw").isInstanceOf(OutOfMemoryError.class);
    assertThat(outcomes.isPending(key))
        .as("SUCCESS taken for on its way (its claim not ended again), though nothing retries it")
        .isFalse();
  }

  @Test
  void aMarkThatCannotBeKeptForRetryingLeavesItsLeaseToRunOut() throws Exception {
    DedupKey key = DedupKey.of("payment", "KS-2");
    ClaimResult.Claimed claim = claim(key, "test-owner");
    LeaseRenewer.Renewal renewal = renewals.start(claim, System.nanoTime());

    CompletableFuture<Void> written =
        outcomes.completeLater(key, claim.token(), null, renewal, Duration.ZERO);
    Throwable failed = catchThrowable(() -> written.get(10, TimeUnit.SECONDS));
    assertThat(failed).as("how the mark's future ended").isNotNull();
    Thread.sleep(3 * LEASE.toMillis()); // longer than a lease: only a renewal still holds the key

    assertThat(db.store().claim(request(key, "rival-owner")))
        .as("another consumer's claim of the key, three leases after its mark was not kept")
        .isInstanceOf(ClaimResult.Claimed.class);
  }

  private static ClaimResult.Claimed claim(DedupKey key, String owner) {
    ClaimResult result = db.store().claim(request(key, owner));
    assertThat(result).isInstanceOf(ClaimResult.Claimed.class);
    return (ClaimResult.Claimed) result;
  }

  private static ClaimRequest request(DedupKey key, String owner) {
    return new ClaimRequest(key, owner, LEASE, RETENTION, null, null);
  }
}
