package io.consumerdedup.kafka;

import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.DedupStoreUnavailableException;
import io.consumerdedup.testing.InterceptedStore;
import java.util.concurrent.atomic.AtomicInteger;

/** A store that refuses every SUCCESS, as an unreachable database would, until told not to. */
final class SuccessRefusingStore {
  final AtomicInteger refusals = new AtomicInteger();
  volatile boolean refusing = true;
  private final DedupStore store;

  SuccessRefusingStore(DedupStore delegate) {
    store =
        InterceptedStore.before(
            delegate,
            (method, args) -> {
              if (refusing && writesSuccess(method.getName())) {
                refusals.incrementAndGet();
                throw new DedupStoreUnavailableException(
                    "SUCCESS refused (injected)", null, null, null);
              }
            });
  }

  private static boolean writesSuccess(String call) {
    return switch (call) {
      case "complete", "completeAll", "claimCompleting" -> true;
      default -> false;
    };
  }

  /** The store to give the executor. */
  DedupStore store() {
    return store;
  }
}
