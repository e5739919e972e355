package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.testing.StoreFixture;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Supplier;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The application's {@link DedupListener} throws an {@code Error} each time it is told that a
 * renewal found a lease lost. The keys of a poll whose records vanished (an asynchronous failover,
 * a purge, an operator's DELETE) are each reported; the poll's other claims, renewed by the same
 * store calls, must go on being known as held.
 */
class LeaseLostListenerErrorTest {
  private static final Duration LEASE = Duration.ofMillis(1500);

  @RegisterExtension static final StoreFixture db = new StoreFixture("leaselosterror", 4);

  @Test
  void aListenerErrorOnOneLostLeaseDoesNotLeaveThePollsOtherClaimsUnrenewed() throws Exception {
    lostLeasesLeaveTheOtherClaimsRenewed(
        "held", () -> new NoClassDefFoundError("io/metrics/Counter"));
  }

  /**
   * As above, with an {@code Error} whose {@code getMessage()} throws (a metrics library's, say):
   * the renewer's ERROR line about the listener (Logback reads the message in the log call) must
   * not end the reading of the store's answer either.
   */
  @Test
  void anUnprintableListenerErrorOnOneLostLeaseDoesNotLeaveThePollsOtherClaimsUnrenewed()
      throws Exception {
    lostLeasesLeaveTheOtherClaimsRenewed(
        "held-unprintable",
        () ->
            new NoClassDefFoundError() {
              private static final long serialVersionUID = 1L;

              @Override
              public String getMessage() {
                throw new IllegalStateException("the metrics registry is closed");
              }
            });
  }

  private void lostLeasesLeaveTheOtherClaimsRenewed(String heldKey, Supplier<Error> thrown)
      throws Exception {
    AtomicInteger told = new AtomicInteger();
    IdempotentExecutor executor =
        db.executor(
            IdempotentExecutor.builder(db.store())
                .lease(LEASE)
                .listener(
                    new DedupListener() {
                      @Override
                      public void leaseLost(DedupKey key, int attempt) {
                        told.incrementAndGet();
                        throw thrown.get();
                      }
                    }));
    List<IdempotentExecutor.Delivery> poll = new ArrayList<>();
    for (int i = 0; i < 4; i++) {
      poll.add(
          new IdempotentExecutor.Delivery(
              DedupKey.of("payment", heldKey + "-vanished-" + i), null, "p@" + i));
    }
    poll.add(new IdempotentExecutor.Delivery(DedupKey.of("payment", heldKey), null, "p@4"));
    DedupClaims claims = executor.claimAll(poll);
    for (int i = 0; i < 5; i++) {
      assertThat(claims.get(i).isDuplicate()).isFalse();
    }

    execute("DELETE FROM consumer_dedup WHERE biz_key LIKE '" + heldKey + "-vanished-%'");
    // Longer than the lease: renewed every half second, the held claim's lease never lapsed.
    Thread.sleep(LEASE.toMillis() + 600);

    assertThat(claims.get(4).isLeaseLost())
        .as(
            "the held claim's lease lost, by its own process's reckoning (%s lost leases told)",
            told)
        .isFalse();
    assertThat(db.store().find(DedupKey.of("payment", heldKey)).orElseThrow().isLeaseLive())
        .as("its lease live in the database")
        .isTrue();
    assertThat(told).as("lost leases told").hasValue(4);
    claims.get(4).complete();
  }

  private static void execute(String sql) throws Exception {
    try (Connection connection = db.dataSource().getConnection();
        PreparedStatement statement = connection.prepareStatement(sql)) {
      statement.executeUpdate();
    }
  }
}
