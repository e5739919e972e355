package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.internal.FaultPoints;
import io.consumerdedup.testing.HandOverErrors;
import io.consumerdedup.testing.StoreFixture;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * An asynchronous handler its caller stopped waiting for ({@link DedupClaim#stopRenewing()}) ends
 * within the lease after all, and an {@code Error} (an {@code OutOfMemoryError} as its SUCCESS is
 * allocated) strikes the hand-over of that SUCCESS. The renewal being over was taken for the
 * outcome being handed over: the second try was skipped, no SUCCESS written or kept, and the
 * redelivery after the lease ran the handler again. So too once a renewal found the key's record
 * vanished (a failover to a standby that had not received it, a DELETE), whose outcome is to be
 * written again when the handler ends.
 */
class StoppedRenewalSuccessErrorTest {
  private static final Duration LEASE = Duration.ofSeconds(1);

  @RegisterExtension static final StoreFixture db = new StoreFixture("stoppedrenewal", 2);

  @AfterEach
  void removeHook() {
    FaultPoints.install(null);
  }

  @Test
  void aLateSuccessWhoseHandOverMeetsAnErrorIsStillRecordedAndTheRedeliveryIsADuplicate()
      throws InterruptedException {
    IdempotentExecutor executor = executor();
    DedupKey key = DedupKey.of("payment", "LATE-1");
    DedupClaim claim = executor.claim(key, null, "payments-0@21");
    claim.stopRenewing(); // the caller's timeout passed; the handler goes on and ends in time
    strikeOnce();

    assertThatThrownBy(claim::completeAsync).isInstanceOf(OutOfMemoryError.class);
    executor.flushMarks();
    Thread.sleep(2 * LEASE.toMillis()); // the lease has run out: only a record keeps the key

    DedupClaim redelivery = executor.claim(key, null, "payments-0@21");
    assertThat(redelivery.isDuplicate())
        .as("the redelivery of a record whose handler returned, answered %s", redelivery)
        .isTrue();
  }

  @Test
  void aSuccessWhoseRecordVanishedAndWhoseHandOverMeetsAnErrorIsStillWrittenAgain()
      throws Exception {
    IdempotentExecutor executor = executor();
    DedupKey key = DedupKey.of("payment", "VANISHED-1");
    DedupClaim claim = executor.claim(key, null, "payments-0@22");
    execute("DELETE FROM consumer_dedup WHERE biz_key = 'VANISHED-1'"); // an operator's DELETE
    await()
        .atMost(Duration.ofSeconds(5))
        .alias("a renewal found the record vanished")
        .until(claim::isLeaseLost);
    strikeOnce();

    assertThatThrownBy(claim::complete).isInstanceOf(OutOfMemoryError.class);

    assertThat(db.store().find(key).map(DedupRecord::status))
        .as("the key's record once the handler returned")
        .contains(DedupStatus.SUCCESS);
  }

  private static IdempotentExecutor executor() {
    return db.executor(
        IdempotentExecutor.builder(db.store())
            .lease(LEASE)
            .renewalInterval(Duration.ofMillis(200)));
  }

  /** The first hand-over of an outcome fails for want of memory. */
  private static void strikeOnce() {
    AtomicInteger tries = new AtomicInteger();
    HandOverErrors.strikeWhen(() -> tries.getAndIncrement() < 1);
  }

  private static void execute(String sql) throws Exception {
    try (Connection connection = db.dataSource().getConnection();
        PreparedStatement statement = connection.prepareStatement(sql)) {
      statement.executeUpdate();
    }
  }
}
