package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TestDatabase;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * A claim whose handler never ran, held past its first lease by renewals, and whose give-back the
 * database refuses: the next delivery to the same process takes it up, as it does for a claim given
 * back within its first lease, instead of being told "in progress" by this process's own claim.
 */
class RenewedClaimReleaseTest {
  private static final Duration LEASE = Duration.ofSeconds(1);
  private static String schema;
  private static HikariDataSource dataSource;

  @BeforeAll
  static void setUp() {
    schema = TestDatabase.newSchema("renewedrelease");
    dataSource = TestDatabase.dataSource(schema, 4);
  }

  @AfterAll
  static void tearDown() {
    dataSource.close();
    TestDatabase.dropSchema(schema);
  }

  @Test
  void aPollsUnusedClaimRenewedPastItsLeaseWhoseReleaseFailedIsTakenUpByTheNextPoll()
      throws Exception {
    DedupKey key = DedupKey.of("payment", "unused-" + UUID.randomUUID());
    AtomicInteger runs = new AtomicInteger();
    try (IdempotentExecutor executor = executor()) {
      DedupClaims poll =
          executor.claimAll(List.of(new IdempotentExecutor.Delivery(key, null, "payments-0@7")));
      // The records before it took longer than a lease; its lease was renewed meanwhile.
      Thread.sleep(LEASE.multipliedBy(3).toMillis() / 2);
      refuseDeletes(true);
      try {
        poll.releaseUnended(); // refused: logged, the lease left to run out
      } finally {
        refuseDeletes(false);
      }

      Throwable redelivery = catchThrowable(() -> executor.execute(key, runs::incrementAndGet));

      assertThat(redelivery).as("the redelivery of the record, to the same process").isNull();
      assertThat(runs).as("handler runs").hasValue(1);
    }
  }

  @Test
  void aClaimRenewedPastItsLeaseWhoseReleaseFailedIsTakenUpByTheNextDelivery() throws Exception {
    DedupKey key = DedupKey.of("payment", "released-" + UUID.randomUUID());
    AtomicInteger runs = new AtomicInteger();
    try (IdempotentExecutor executor = executor()) {
      DedupClaim claim = executor.claim(key, null, "payments-0@8");
      Thread.sleep(LEASE.multipliedBy(3).toMillis() / 2);
      refuseDeletes(true);
      try {
        claim.release();
      } finally {
        refuseDeletes(false);
      }

      Throwable redelivery = catchThrowable(() -> executor.execute(key, runs::incrementAndGet));

      assertThat(redelivery).as("the redelivery of the record, to the same process").isNull();
      assertThat(runs).as("handler runs").hasValue(1);
    }
  }

  private static IdempotentExecutor executor() {
    JdbcDedupStore store =
        JdbcDedupStore.builder(dataSource).retryMaxDuration(Duration.ofMillis(300)).build();
    return IdempotentExecutor.builder(store).lease(LEASE).build();
  }

  /** Makes the dedup table refuse deletes (the release of a first claim), or not. */
  private static void refuseDeletes(boolean refuse) throws SQLException {
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement()) {
      if (refuse) {
        statement.execute(
            "CREATE FUNCTION refuse_deletes() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
                + " RAISE EXCEPTION 'cannot execute % in a read-only transaction', TG_OP"
                + " USING ERRCODE = '25006'; END $$");
        statement.execute(
            "CREATE TRIGGER refuse_deletes BEFORE DELETE ON consumer_dedup"
                + " FOR EACH ROW EXECUTE FUNCTION refuse_deletes()");
      } else {
        statement.execute("DROP TRIGGER refuse_deletes ON consumer_dedup");
        statement.execute("DROP FUNCTION refuse_deletes()");
      }
    }
  }
}
