package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.consumerdedup.core.internal.FaultPoints;
import io.consumerdedup.testing.StoreFixture;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * An {@code Error} (an {@code OutOfMemoryError} as the outcome is allocated) strikes once a claim
 * is ended as completed and before its SUCCESS is written, queued or kept. The claim counted as
 * ended, so nothing ended it again, while its lease went on being renewed for the executor's life:
 * the key stayed PROCESSING, every later delivery "in progress", though its handler had applied its
 * effect.
 */
class CompletionErrorTest {
  private static final Duration LEASE = Duration.ofSeconds(1);

  @RegisterExtension static final StoreFixture db = new StoreFixture("completionerror", 4);

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
    IdempotentExecutor executor =
        db.executor(
            IdempotentExecutor.builder(db.store())
                .lease(LEASE)
                .renewalInterval(Duration.ofMillis(200)));
    DedupKey key = DedupKey.of("payment", "ORD-" + completion);
    AtomicInteger struck = new AtomicInteger();
    FaultPoints.install(
        point -> {
          if (point == FaultPoints.Point.COMPLETING && struck.getAndIncrement() == 0) {
            throw new OutOfMemoryError("Java heap space, handing the SUCCESS over");
          }
        });
    DedupClaim claim = executor.claim(key, null, "payments-0@7");
    assertThatThrownBy(() -> completion.ending.accept(claim)).isInstanceOf(OutOfMemoryError.class);
    executor.flushMarks();
    Thread.sleep(2 * LEASE.toMillis()); // the lease of a claim left open would run out meanwhile

    DedupClaim redelivery = executor.claim(key, null, "payments-0@7");
    assertThat(redelivery.isDuplicate())
        .as("the redelivery of a record whose handler returned, answered %s", redelivery)
        .isTrue();
    assertThat(db.store().find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
  }
}
