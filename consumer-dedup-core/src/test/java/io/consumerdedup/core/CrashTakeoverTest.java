package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.ChildJvm;
import io.consumerdedup.testing.TestDatabase;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** A consumer process killed inside its handler: its lease runs out, then another takes over. */
class CrashTakeoverTest {
  private static final Duration LEASE = Duration.ofSeconds(3);

  private static String schema;
  private static HikariDataSource dataSource;

  @BeforeAll
  static void setUp() {
    schema = TestDatabase.newSchema("crash");
    dataSource = TestDatabase.dataSource(schema, 2);
  }

  @AfterAll
  static void tearDown() {
    dataSource.close();
    TestDatabase.dropSchema(schema);
  }

  @Test
  void aKilledHolderBlocksTheKeyUntilItsLeaseExpiresThenAnotherConsumerTakesOver()
      throws Exception {
    killedHolderIsTakenOverAfterItsLease(dataSource, TestDatabase.url(schema));
  }

  /**
   * Kills a child JVM (connecting with {@code childUrl}) inside its handler and takes its key over
   * through {@code dataSource} once the lease has run out; shared with the other databases' tests.
   */
  static void killedHolderIsTakenOverAfterItsLease(DataSource dataSource, String childUrl)
      throws Exception {
    DedupKey key = DedupKey.of("payment", "ORD-crash-1");
    JdbcDedupStore store = JdbcDedupStore.builder(dataSource).build();
    AtomicInteger charges = new AtomicInteger();

    try (ChildJvm child =
            ChildJvm.start(
                ChildClaimer.class,
                childUrl,
                key.bizType(),
                key.bizKey(),
                String.valueOf(LEASE.toMillis()));
        IdempotentExecutor survivor =
            IdempotentExecutor.builder(store).ownerId("survivor").lease(LEASE).build()) {
      String started = child.awaitLine("HANDLER-STARTED", Duration.ofSeconds(60));
      child.kill();
      long killedAt = System.nanoTime();

      assertThatThrownBy(() -> survivor.execute(key, charges::incrementAndGet))
          .isInstanceOf(DedupInProgressException.class)
          .hasMessageContaining("child-" + started.substring("HANDLER-STARTED ".length()));

      DedupResult<Integer> takeover =
          await()
              .atMost(Duration.ofSeconds(20))
              .pollInterval(Duration.ofMillis(200))
              .ignoreException(DedupInProgressException.class)
              .until(() -> survivor.execute(key, charges::incrementAndGet), r -> true);

      assertThat(Duration.ofNanos(System.nanoTime() - killedAt))
          .as("not before the dead holder's lease ran out")
          .isGreaterThanOrEqualTo(LEASE.minusMillis(1500));
      assertThat(takeover.outcome()).isEqualTo(Outcome.PROCESSED);
      assertThat(takeover.attempt()).isEqualTo(2);
      assertThat(charges).hasValue(1);
      DedupRecord record = store.find(key).orElseThrow();
      assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
      assertThat(record.attempts()).isEqualTo(2);
      assertThat(record.owner()).isEqualTo("survivor");
    }
  }
}
