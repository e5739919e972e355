package io.consumerdedup.core.internal;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.testing.StoreFixture;
import java.time.Duration;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * A SUCCESS mark left for its thread's next claim ({@code completeWithNextClaim}) cannot be parked:
 * putting it meets an {@code OutOfMemoryError}. Already listed as on its way, it was in no queue
 * and parked nowhere: its claim took it for handed over and was never ended again, nothing wrote
 * it, and its key stayed PROCESSING under a lease renewed for the executor's life.
 */
class ParkRefusedTest {
  @RegisterExtension static final StoreFixture db = new StoreFixture("parkrefused", 2);

  private static final Duration LEASE = Duration.ofSeconds(5);
  private static final Duration RETENTION = Duration.ofDays(1);

  private LeaseRenewer renewer;
  private SuccessMarkWriter marks;

  @AfterEach
  void stop() {
    if (marks != null) {
      marks.close();
    }
    if (renewer != null) {
      renewer.close();
    }
  }

  @Test
  void aMarkThatCannotBeParkedIsStillWritten() throws Exception {
    renewer = new LeaseRenewer(db.store(), LEASE, Duration.ofSeconds(1), DedupListener.NOOP);
    PendingOutcomes pending =
        new PendingOutcomes(
            db.store(), DedupListener.NOOP, renewer, RETENTION, RETENTION, Duration.ofMillis(200));
    AtomicBoolean strike = new AtomicBoolean(true);
    ConcurrentHashMap<Thread, PendingOutcome> refusingOnce =
        new ConcurrentHashMap<>() {
          @Override
          public PendingOutcome put(Thread thread, PendingOutcome mark) {
            if (strike.getAndSet(false)) {
              throw new OutOfMemoryError("Java heap space, parking the mark");
            }
            return super.put(thread, mark);
          }
        };
    marks =
        new SuccessMarkWriter(
            db.store(),
            renewer::after,
            pending,
            RETENTION,
            Duration.ofSeconds(5),
            running -> new Thread(running, "park-refused-writer"),
            new LinkedBlockingQueue<>(),
            refusingOnce);
    DedupKey key = DedupKey.of("payment", "PARK-1");
    long sent = System.nanoTime();
    ClaimResult.Claimed claim =
        (ClaimResult.Claimed)
            db.store().claim(new ClaimRequest(key, "park-test", LEASE, RETENTION, null, null));
    PendingOutcome mark =
        PendingOutcome.success(key, claim.token(), null, renewer.start(claim, sent), Duration.ZERO);
    pending.add(mark); // as completeWithNextClaim lists it before parking it

    Throwable parking = catchThrowable(() -> marks.park(mark));
    Throwable waiting = catchThrowable(() -> mark.written.get(5, TimeUnit.SECONDS));

    assertThat(waiting).as("waiting for the mark (parking threw %s)", parking).isNull();
    assertThat(db.store().find(key).map(DedupRecord::status)).contains(DedupStatus.SUCCESS);
  }
}
