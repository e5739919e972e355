package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import io.consumerdedup.core.internal.FaultPoints;
import io.consumerdedup.testing.HandOverErrors;
import io.consumerdedup.testing.StoreFixture;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * A batch's claim whose handler failed, and whose FAILED met an {@code Error} at both tries to hand
 * it over: the claim is open again. {@link DedupClaims#releaseUnended()} gave it back as a claim
 * whose handler never ran: the key's record vanished, the attempt uncounted, and the next delivery
 * ran the handler as attempt 1 again. And one whose handler returned, whose SUCCESS met the same
 * passing {@code Error}: a user expects the record applied once, its redelivery a duplicate.
 */
class UnhandedOutcomeSettleTest {
  @RegisterExtension static final StoreFixture db = new StoreFixture("unhanded_outcome", 2);

  private IdempotentExecutor executor;
  private final AtomicInteger handOversTried = new AtomicInteger();

  @AfterEach
  void removeHook() {
    FaultPoints.install(null);
  }

  @Test
  void aClaimWhoseFailureCouldNotBeHandedOverIsEndedFailedNotGivenBack() {
    DedupKey key = DedupKey.of("payment", "UO-1");

    Throwable thrown =
        endThenSettle(
            key, "payments-0@3", claim -> claim.fail(new IllegalStateException("declined")));

    assertThat(thrown).as("what failing the claim threw").isInstanceOf(OutOfMemoryError.class);
    DedupRecord row = db.store().find(key).orElseThrow(() -> new AssertionError("no record"));
    assertThat(row.status()).as("the key's record after the settle").isEqualTo(DedupStatus.FAILED);
    assertThat(row.attempts()).as("attempts counted").isEqualTo(1);
    assertThat(handOversTried).as("hand-overs tried, two of them struck").hasValueGreaterThan(2);
    DedupClaim redelivery = executor.claim(key, null, "payments-0@3");
    assertThat(redelivery.attempt()).as("the redelivery's attempt").isEqualTo(2);
    redelivery.complete();
  }

  @Test
  void aClaimWhoseSuccessCouldNotBeHandedOverIsRecordedSuccessNotFailed() {
    DedupKey key = DedupKey.of("payment", "UO-2");

    Throwable thrown = endThenSettle(key, "payments-0@4", DedupClaim::complete); // applied

    assertThat(thrown).as("what completing the claim threw").isInstanceOf(OutOfMemoryError.class);
    assertThat(handOversTried).as("hand-overs tried, two of them struck").hasValueGreaterThan(2);
    DedupRecord row = db.store().find(key).orElseThrow(() -> new AssertionError("no record"));
    assertThat(row.status()).as("the key's record after the settle").isEqualTo(DedupStatus.SUCCESS);
    assertThat(executor.claim(key, null, "payments-0@4").isDuplicate())
        .as("the redelivery of a record applied once: a duplicate, not run again")
        .isTrue();
  }

  /**
   * Claims {@code key} in a batch of one, ends its claim with {@code end} while the first two
   * hand-overs of an outcome meet an {@code OutOfMemoryError}, then settles the batch as its end
   * does; returns what {@code end} threw, and counts the hand-overs tried in {@link
   * #handOversTried}.
   */
  private Throwable endThenSettle(DedupKey key, String source, Consumer<DedupClaim> end) {
    executor =
        db.executor(
            IdempotentExecutor.builder(db.store())
                .lease(Duration.ofSeconds(1))
                .renewalInterval(Duration.ofMillis(200)));
    DedupClaims claims =
        executor.claimAll(List.of(new IdempotentExecutor.Delivery(key, null, source)));
    DedupClaim claim = claims.get(0);
    HandOverErrors.strikeWhen(() -> handOversTried.getAndIncrement() < 2);

    Throwable thrown = catchThrowable(() -> end.accept(claim));
    claims.releaseUnended();
    return thrown;
  }
}
