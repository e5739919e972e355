package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.catchThrowable;

import io.consumerdedup.core.internal.FaultPoints;
import io.consumerdedup.testing.HandOverErrors;
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

  /**
   * Both tries of handing the outcome over fail with an {@code Error}: the claim is open again, for
   * its caller to end. A caller of {@code execute} holds no claim to end: the key stayed PROCESSING
   * under a lease renewed for the executor's life, each redelivery "in progress", though the
   * handler had applied its effect.
   */
  @Test
  void anExecuteWhoseSuccessCannotBeHandedOverTwiceStillRecordsIt() throws InterruptedException {
    IdempotentExecutor executor = executor();
    DedupKey key = DedupKey.of("payment", "ORD-TWICE");
    AtomicInteger charges = new AtomicInteger();
    strike(2);
    Throwable thrown =
        catchThrowable(
            () -> executor.execute(key, null, "payments-0@9", () -> charges.incrementAndGet()));
    assertThat(thrown).as("what execute threw").isInstanceOf(OutOfMemoryError.class);
    Thread.sleep(2 * LEASE.toMillis()); // longer than a lease: only a renewal still holds the key

    Throwable redelivered =
        catchThrowable(
            () ->
                assertThat(executor.claim(key, null, "payments-0@9").isDuplicate())
                    .as("the redelivery of a record whose handler returned is a duplicate")
                    .isTrue());
    assertThat(redelivered).as("what the redelivery's claim threw").isNull();
    assertThat(db.store().find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(charges).hasValue(1);
  }

  /** As above, with the handler's failure: FAILED is recorded, and the redelivery retries. */
  @Test
  void anExecuteWhoseFailureCannotBeHandedOverTwiceStillRecordsIt() throws InterruptedException {
    IdempotentExecutor executor = executor();
    DedupKey key = DedupKey.of("payment", "ORD-TWICE-FAIL");
    strike(2);
    Throwable thrown =
        catchThrowable(
            () ->
                executor.execute(
                    key,
                    null,
                    "payments-0@10",
                    () -> {
                      throw new IllegalStateException("card declined");
                    }));
    assertThat(thrown).as("what execute threw").isNotNull();
    Thread.sleep(2 * LEASE.toMillis());

    assertThat(db.store().find(key).orElseThrow().status())
        .as("the key's record, two leases after its handler failed")
        .isEqualTo(DedupStatus.FAILED);
  }

  private static IdempotentExecutor executor() {
    return db.executor(
        IdempotentExecutor.builder(db.store())
            .lease(LEASE)
            .renewalInterval(Duration.ofMillis(200)));
  }

  private static void strikeOnce() {
    strike(1);
  }

  /** The first {@code times} tries of handing an outcome over fail for want of memory. */
  private static void strike(int times) {
    AtomicInteger tries = new AtomicInteger();
    HandOverErrors.strikeWhen(() -> tries.getAndIncrement() < times);
  }
}
