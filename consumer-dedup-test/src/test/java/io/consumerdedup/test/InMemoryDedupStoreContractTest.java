package io.consumerdedup.test;

import io.consumerdedup.core.DedupStore;
import java.time.Duration;

/** The in-memory store keeps the store contract, its leases running out on a test clock. */
// tag::contract[] (docs/testing.md)
class InMemoryDedupStoreContractTest extends DedupStoreContract {
  private final TestClock clock = new TestClock();
  private final InMemoryDedupStore store = new InMemoryDedupStore(clock);

  @Override
  protected DedupStore store() {
    return store;
  }

  @Override
  protected void letTimePass(Duration duration) {
    clock.advance(duration);
  }
}
// end::contract[]
