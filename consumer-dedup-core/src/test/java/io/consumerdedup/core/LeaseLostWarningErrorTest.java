package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import io.consumerdedup.testing.StoreFixture;
import io.consumerdedup.testing.ThrowingLog;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The warning that a SUCCESS was not recorded, its lease taken over, cannot be logged (an appender
 * throwing an {@code Error}, an {@code OutOfMemoryError} as the line is formatted). Whoever waits
 * for the SUCCESS must still be told it was not written.
 */
class LeaseLostWarningErrorTest {
  @RegisterExtension static final StoreFixture db = new StoreFixture("leaselostwarning", 4);

  /**
   * The warning came before the future was failed, outside the guard that fails it: an {@code
   * Error} there left the future of {@code completeAsync()} unanswered for good, and a caller
   * waiting for it before committing its offset hung.
   */
  @Test
  void anErrorLoggingTheLostLeaseStillFailsTheFutureOfCompleteAsyncInsteadOfHangingIt()
      throws Exception {
    IdempotentExecutor executor =
        db.executor(IdempotentExecutor.builder(db.store()).lease(Duration.ofMinutes(1)));
    IdempotentExecutor rival =
        db.executor(IdempotentExecutor.builder(db.store()).lease(Duration.ofMinutes(1)));
    DedupKey key = DedupKey.of("payment", "taken-over");
    DedupClaim claim = executor.claim(key, null, null);
    execute(
        "UPDATE consumer_dedup SET lease_until = now() - interval '1 second'"
            + " WHERE biz_key = 'taken-over'"); // its lease ran out, as after a long pause
    assertThat(rival.claim(key, null, null).attempt()).as("taken over").isEqualTo(2);

    ThrowingLog warnings =
        ThrowingLog.on(
            "io.consumerdedup.core.internal.PendingOutcomes",
            "Lease on",
            () -> new OutOfMemoryError("Java heap space, formatting the warning"));
    Throwable waited;
    try (warnings) {
      CompletableFuture<Void> written = claim.completeAsync();
      waited = catchThrowable(() -> written.get(10, TimeUnit.SECONDS));
    }

    assertThat(warnings.threw()).as("warnings that threw").isEqualTo(1);
    assertThat(waited)
        .as("what the wait for the SUCCESS of a key taken over ended with")
        .isInstanceOf(ExecutionException.class)
        .hasCauseInstanceOf(DedupLeaseLostException.class);
    assertThat(db.store().find(key).orElseThrow().status())
        .as("the new holder's claim, untouched")
        .isEqualTo(DedupStatus.PROCESSING);
  }

  private static void execute(String sql) throws Exception {
    try (Connection connection = db.dataSource().getConnection();
        PreparedStatement statement = connection.prepareStatement(sql)) {
      statement.executeUpdate();
    }
  }
}
