package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.consumerdedup.core.internal.FaultPoints;
import io.consumerdedup.testing.StoreFixture;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * An {@code Error} (an {@code OutOfMemoryError}) as one of a poll's unended claims is given back by
 * {@link DedupClaims#releaseUnended()}. The give-back stopped there: the poll's later open claims,
 * which their caller had already dropped, went on being renewed for the executor's life, their keys
 * "in progress" for every other consumer.
 */
class ReleaseUnendedErrorTest {
  private static final Duration LEASE = Duration.ofSeconds(1);

  @RegisterExtension static final StoreFixture db = new StoreFixture("releaseunended", 4);

  @AfterEach
  void removeHook() {
    FaultPoints.install(null);
  }

  @Test
  void anErrorGivingBackOneClaimStillGivesBackThePollsOthers() throws InterruptedException {
    IdempotentExecutor executor = executor();
    IdempotentExecutor rival = executor();
    List<DedupKey> keys =
        List.of(
            DedupKey.of("payment", "GB-1"),
            DedupKey.of("payment", "GB-2"),
            DedupKey.of("payment", "GB-3"));
    List<IdempotentExecutor.Delivery> poll = new ArrayList<>();
    for (int i = 0; i < keys.size(); i++) {
      poll.add(new IdempotentExecutor.Delivery(keys.get(i), null, "payments-0@" + (40 + i)));
    }
    DedupClaims claims = executor.claimAll(poll);
    AtomicBoolean strike = new AtomicBoolean(true);
    FaultPoints.install(
        point -> {
          if (point == FaultPoints.Point.GIVING_BACK && strike.getAndSet(false)) {
            throw new OutOfMemoryError("Java heap space, giving the claims back");
          }
        });

    assertThatThrownBy(claims::releaseUnended).isInstanceOf(OutOfMemoryError.class);
    Thread.sleep(2 * LEASE.toMillis()); // longer than a lease: only a renewal still holds a key

    List<String> taken = new ArrayList<>();
    for (DedupKey key : keys) {
      try {
        DedupClaim claim = rival.claim(key, null, "payments-1@40");
        taken.add(key.bizKey() + " claimed");
        claim.complete();
      } catch (DedupInProgressException e) {
        taken.add(key.bizKey() + " in progress");
      }
    }
    assertThat(taken)
        .as("another consumer's claims of the poll's keys, two leases after the give-back")
        .containsExactly("GB-1 claimed", "GB-2 claimed", "GB-3 claimed");
  }

  private static IdempotentExecutor executor() {
    return db.executor(
        IdempotentExecutor.builder(db.store())
            .lease(LEASE)
            .renewalInterval(Duration.ofMillis(200)));
  }
}
