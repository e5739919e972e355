package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.catchThrowable;

import io.consumerdedup.core.internal.FaultPoints;
import io.consumerdedup.testing.StoreFixture;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * An {@code Error} (an {@code OutOfMemoryError} as the outcome is allocated) strikes once a claim
 * is ended and before its outcome is written, queued or kept. The claim counted as ended, so
 * nothing ended it again, while its lease went on being renewed for the executor's life: the key
 * stayed PROCESSING, every later delivery "in progress", though its handler had applied its effect
 * (or had failed, and was to be run again).
 */
class ClaimEndErrorTest {
  private static final Duration LEASE = Duration.ofSeconds(1);

  @RegisterExtension static final StoreFixture db = new StoreFixture("claimenderror", 4);

  /** The three ways of ending a claim as completed. */
  enum Completion {
    COMPLETE(DedupClaim::complete),
    COMPLETE_ASYNC(DedupClaim::completeAsync),
    COMPLETE_WITH_NEXT_CLAIM(DedupClaim::completeWithNextClaim);

    final Consumer<DedupClaim> ending;

    Completion(Consumer<DedupClaim> ending) {
      this.ending = ending;
    }
  }

  @AfterEach
  void removeHook() {
    FaultPoints.install(null);
  }

  @ParameterizedTest
  @EnumSource(Completion.class)
  void anErrorAsTheSuccessIsHandedOverStillRecordsItAndTheRedeliveryIsADuplicate(
      Completion completion) throws InterruptedException {
    IdempotentExecutor executor = executor();
    DedupKey key = DedupKey.of("payment", "ORD-" + completion);
    strikeOnce();
    DedupClaim claim = executor.claim(key, null, "payments-0@7");
    assertThatThrownBy(() -> completion.ending.accept(claim)).isInstanceOf(OutOfMemoryError.class);
    executor.flushMarks();
    Thread.sleep(2 * LEASE.toMillis()); // longer than a lease: only a renewal still holds the key

    DedupClaim redelivery = executor.claim(key, null, "payments-0@7");
    assertThat(redelivery.isDuplicate())
        .as("the redelivery of a record whose handler returned, answered %s", redelivery)
        .isTrue();
    assertThat(db.store().find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
  }

  @Test
  void anErrorAsTheFailureIsHandedOverStillRecordsItAndTheRedeliveryRunsTheHandlerAgain()
      throws InterruptedException {
    IdempotentExecutor executor = executor();
    DedupKey key = DedupKey.of("payment", "ORD-FAIL");
    strikeOnce();
    DedupClaim claim = executor.claim(key, null, "payments-0@8");
    IllegalStateException declined = new IllegalStateException("card declined");
    Throwable thrown = catchThrowable(() -> claim.fail(declined));
    Thread.sleep(2 * LEASE.toMillis()); // longer than a lease: only a renewal still holds the key

    assertThat(db.store().find(key).orElseThrow().status())
        .as("the key's record, two leases after its handler failed")
        .isEqualTo(DedupStatus.FAILED);
    assertThat(thrown).as("what ending the claim with the handler's failure threw").isNull();
    assertThat(declined.getSuppressed()).singleElement().isInstanceOf(OutOfMemoryError.class);

    DedupClaim redelivery = executor.claim(key, null, "payments-0@8");
    assertThat(redelivery.attempt()).as("the redelivery's attempt").isEqualTo(2);
    redelivery.complete();
    assertThat(db.store().find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
  }

  private static IdempotentExecutor executor() {
    return db.executor(
        IdempotentExecutor.builder(db.store())
            .lease(LEASE)
            .renewalInterval(Duration.ofMillis(200)));
  }

  private static void strikeOnce() {
    AtomicInteger struck = new AtomicInteger();
    FaultPoints.install(
        point -> {
          if (point == FaultPoints.Point.ENDING && struck.getAndIncrement() == 0) {
            throw new OutOfMemoryError("Java heap space, handing the outcome over");
          }
        });
  }
}
