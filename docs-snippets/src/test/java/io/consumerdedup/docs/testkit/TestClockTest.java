package io.consumerdedup.docs.testkit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.DedupInProgressException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupResult;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.test.InMemoryDedupStore;
import io.consumerdedup.test.TestClock;
import java.time.Duration;
import org.junit.jupiter.api.Test;

/** docs/testing.md: a test moves the lease clock on instead of sleeping. */
class TestClockTest {
  @Test
  void aKeyWhoseHolderCrashedIsTakenOverOnceTheClockPassesItsLease() throws Exception {
    // tag::test-clock[]
    TestClock clock = new TestClock();
    InMemoryDedupStore store = new InMemoryDedupStore(clock);
    IdempotentExecutor executor =
        IdempotentExecutor.builder(store).lease(Duration.ofSeconds(30)).build();

    // ... a consumer claims order-7, then "crashes" without an outcome
    // end::test-clock[]
    DedupKey key = DedupKey.of("payment", "order-7");
    store.claim(
        new ClaimRequest(
            key, "crashed-consumer", Duration.ofSeconds(30), Duration.ofDays(1), null, null));
    assertThatThrownBy(() -> executor.execute(key, () -> "charged"))
        .isInstanceOf(DedupInProgressException.class);

    // tag::test-clock[]
    clock.advance(Duration.ofSeconds(31)); // its lease has run out: the next delivery takes it over
    // end::test-clock[]
    DedupResult<String> takeover = executor.execute(key, () -> "charged");
    assertThat(takeover.outcome()).isEqualTo(Outcome.PROCESSED);
    assertThat(takeover.attempt()).isEqualTo(2);
    executor.close();
  }
}
