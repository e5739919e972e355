package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import io.consumerdedup.testing.StoreFixture;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * A handler throws an exception that cannot describe itself: its {@code getMessage()} (and so its
 * {@code toString()}) throws, as an exception that prints a lazily loaded entity does once its
 * persistence context is closed. The record must still be marked FAILED, so that the next delivery
 * runs the handler again, and the caller must hear the handler's own exception.
 */
class UnprintableHandlerFailureTest {
  @RegisterExtension static final StoreFixture db = new StoreFixture("unprintable", 2);

  @Test
  void aHandlerFailureWhoseMessageThrowsIsRecordedFailedAndTheNextDeliveryRunsTheHandler() {
    recordedFailedAndRunAgain(DedupKey.of("payment", "U-1"), new UnprintableFailure());
  }

  /**
   * As above, a message too large to build: its {@code getMessage()} throws an {@code
   * OutOfMemoryError}. It escaped as FAILED was described, with the claim ended and nothing
   * written, while its lease went on being renewed: the key stayed PROCESSING and every redelivery
   * was "in progress", and the caller heard the OutOfMemoryError instead of the handler's
   * exception.
   */
  @Test
  void aHandlerFailureWhoseMessageCannotBeBuiltForWantOfMemoryIsRecordedFailed() {
    recordedFailedAndRunAgain(DedupKey.of("payment", "U-2"), new UnbuildableMessageFailure());
  }

  private static void recordedFailedAndRunAgain(DedupKey key, RuntimeException failure) {
    IdempotentExecutor executor =
        db.executor(IdempotentExecutor.builder(db.store()).lease(Duration.ofSeconds(30)));
    AtomicInteger runs = new AtomicInteger();

    Throwable thrown =
        catchThrowable(
            () ->
                executor.execute(
                    key,
                    null,
                    "payments-0@7",
                    () -> {
                      runs.incrementAndGet();
                      throw failure;
                    }));

    DedupRecord record = db.store().find(key).orElseThrow();
    assertThat(record.status())
        .as("the key's record after its handler failed with an unprintable exception")
        .isEqualTo(DedupStatus.FAILED);
    assertThat(record.lastError().orElseThrow())
        .as("its last error")
        .startsWith(failure.getClass().getName())
        .contains("getMessage() threw");
    assertThat(thrown).as("what the caller heard").isSameAs(failure);

    DedupResult<String> redelivered = executor.execute(key, null, "payments-0@7", () -> "applied");
    assertThat(redelivered.outcome()).as("the redelivery").isEqualTo(Outcome.PROCESSED);
    assertThat(redelivered.attempt()).as("its attempt").isEqualTo(2);
  }

  /** Formats a payload too large for the heap whenever it is asked for its message. */
  static final class UnbuildableMessageFailure extends RuntimeException {
    private static final long serialVersionUID = 1L;

    @Override
    public String getMessage() {
      throw new OutOfMemoryError("Java heap space, formatting the rejected payload");
    }
  }

  /** Reads what it cannot reach any more whenever it is asked for its message. */
  static final class UnprintableFailure extends RuntimeException {
    private static final long serialVersionUID = 1L;

    @Override
    public String getMessage() {
      throw new UnsupportedOperationException("could not initialize proxy - no Session");
    }
  }
}
