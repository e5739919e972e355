package io.consumerdedup.core.internal;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.testing.InterceptedStore;
import io.consumerdedup.testing.StoreFixture;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The writer's group write of a SUCCESS mark fails, and while the mark is being kept for the
 * background retry a redelivery of its key writes it first ({@code settlePending}). Kept after
 * that, the settled mark was listed again: its key taken for one whose outcome is on its way for
 * the executor's life, and a retry task that never stopped.
 */
class SettledWhileKeptTest {
  @RegisterExtension static final StoreFixture db = new StoreFixture("settledwhilekept", 2);

  private static final Duration LEASE = Duration.ofSeconds(5);
  private static final Duration INTERVAL = Duration.ofMillis(100);
  private static final Duration RETENTION = Duration.ofDays(1);

  private LeaseRenewer renewer;
  private Outcomes outcomes;

  @AfterEach
  void stop() {
    if (outcomes != null) {
      outcomes.close();
    }
    if (renewer != null) {
      renewer.close();
    }
  }

  @Test
  void aMarkWrittenByARedeliveryWhileItIsKeptIsNotListedAgain() throws Exception {
    CountDownLatch heardFailure = new CountDownLatch(1);
    CountDownLatch settledMeanwhile = new CountDownLatch(1);
    DedupListener waitingOnTheFailure =
        new DedupListener() {
          @Override
          public void storeFailed(DedupKey key, DedupStoreException error) {
            heardFailure.countDown();
            try {
              settledMeanwhile.await(10, TimeUnit.SECONDS); // the redelivery's write goes first
            } catch (InterruptedException e) {
              Thread.currentThread().interrupt();
            }
          }
        };
    DedupStore groupWritesRefused =
        InterceptedStore.before(
            db.store(),
            (method, args) -> {
              if (method.getName().equals("completeAll")) {
                throw new DedupStoreException("Connection refused", null, null, null);
              }
            });
    renewer = new LeaseRenewer(db.store(), LEASE, INTERVAL, DedupListener.NOOP);
    outcomes =
        new Outcomes(
            groupWritesRefused, waitingOnTheFailure, renewer, RETENTION, RETENTION, INTERVAL);
    DedupKey key = DedupKey.of("payment", "SK-1");
    ClaimResult result =
        db.store().claim(new ClaimRequest(key, "test-owner", LEASE, RETENTION, null, null));
    ClaimResult.Claimed claim = (ClaimResult.Claimed) result;
    LeaseRenewer.Renewal renewal = renewer.start(claim, System.nanoTime());

    CompletableFuture<Void> written =
        outcomes.completeLater(key, claim.token(), null, renewal, Duration.ZERO);
    assertThat(heardFailure.await(10, TimeUnit.SECONDS)).as("the group write failed").isTrue();
    outcomes.settlePending(key, "payments-0@61"); // the redelivery writes the mark first
    settledMeanwhile.countDown();
    written.get(10, TimeUnit.SECONDS);
    Thread.sleep(5 * INTERVAL.toMillis()); // several retry periods

    assertThat(db.store().find(key).map(DedupRecord::status)).contains(DedupStatus.SUCCESS);
    assertThat(outcomes.unrecorded())
        .as("outcomes said to be not recorded yet, once SUCCESS is")
        .isEmpty();
  }
}
