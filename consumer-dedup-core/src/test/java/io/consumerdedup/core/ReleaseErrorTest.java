package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.catchThrowable;

import io.consumerdedup.core.internal.FaultPoints;
import io.consumerdedup.testing.StoreFixture;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * An {@code Error} (an {@code OutOfMemoryError}) as a claim whose handler did not run is given back
 * with {@link DedupClaim#release()}, after the claim was ended and before the store was asked. The
 * claim was neither given back nor remembered: the redelivery to this very process was told "in
 * progress" by its own claim for a whole lease.
 */
class ReleaseErrorTest {
  @RegisterExtension static final StoreFixture db = new StoreFixture("releaseerror", 2);

  @AfterEach
  void removeHook() {
    FaultPoints.install(null);
  }

  @Test
  void anErrorGivingBackAClaimLeavesItToTheRedeliveryHere() {
    IdempotentExecutor executor =
        db.executor(IdempotentExecutor.builder(db.store()).lease(Duration.ofSeconds(30)));
    DedupKey key = DedupKey.of("payment", "REL-1");
    DedupClaim claim = executor.claim(key, null, "payments-0@71");
    AtomicBoolean strike = new AtomicBoolean(true);
    FaultPoints.install(
        point -> {
          if (point == FaultPoints.Point.GIVING_BACK && strike.getAndSet(false)) {
            throw new OutOfMemoryError("Java heap space, giving the claim back");
          }
        });

    assertThatThrownBy(claim::release).isInstanceOf(OutOfMemoryError.class);

    DedupClaim[] redelivery = new DedupClaim[1];
    Throwable refused =
        catchThrowable(() -> redelivery[0] = executor.claim(key, null, "payments-0@71"));
    assertThat(refused).as("what the redelivery's claim threw").isNull();
    assertThat(redelivery[0].attempt()).as("the redelivery's attempt").isEqualTo(1);
    redelivery[0].complete();
  }
}
