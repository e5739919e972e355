package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupAdmin;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.testing.FaultyDataSource;
import io.consumerdedup.testing.TestDatabase;
import java.time.Duration;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

/**
 * An operator's change whose commit reached the database but whose reply was lost is tried again by
 * the store's retry. By then the next delivery may have claimed the key: the retry must leave that
 * new claim alone, since the operator asked about the claim the first try found.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class AdminChangeReplyLostTest {
  private static final Duration LEASE = Duration.ofMinutes(1);
  private static final Duration RETENTION = Duration.ofDays(1);

  /** Long enough for the next delivery to claim the key before the retry. */
  private static final Duration RETRY_BACKOFF = Duration.ofSeconds(2);

  private String schema;
  private HikariDataSource dataSource;
  private JdbcDedupStore consumers;

  /**
   * The next delivery's thread, its own: on 2 cores the common pool has one thread, which another
   * test's waiting task could hold past the retry's back-off, so that the retry came first.
   */
  private ExecutorService nextDeliveries;

  @BeforeAll
  void setUp() {
    schema = TestDatabase.newSchema("adminlost");
    dataSource = TestDatabase.dataSource(schema, 4);
    consumers = JdbcDedupStore.builder(dataSource).build();
    nextDeliveries = Executors.newCachedThreadPool();
  }

  @AfterAll
  void tearDown() {
    nextDeliveries.shutdownNow();
    dataSource.close();
    TestDatabase.dropSchema(schema);
  }

  private ClaimResult.Claimed claim(DedupKey key, String owner) {
    ClaimResult result =
        consumers.claim(new ClaimRequest(key, owner, LEASE, RETENTION, null, "orders-0@7"));
    assertThat(result).as("claim of " + owner).isInstanceOf(ClaimResult.Claimed.class);
    return (ClaimResult.Claimed) result;
  }

  /** Claims {@code key} for the next delivery as soon as the first try's change has committed. */
  private CompletableFuture<ClaimResult.Claimed> nextDeliveryAfterCommit(
      DedupKey key, int attemptsBefore) {
    return CompletableFuture.supplyAsync(
        () -> {
          await()
              .atMost(Duration.ofSeconds(10))
              .pollInterval(Duration.ofMillis(5))
              .until(
                  () -> {
                    DedupRecord now = consumers.find(key).orElse(null);
                    return now == null
                        || now.status() != DedupStatus.PROCESSING
                        || now.attempts() != attemptsBefore;
                  });
          return claim(key, "next-delivery");
        },
        nextDeliveries);
  }

  private DedupAdmin adminOn(FaultyDataSource faulty) {
    return JdbcDedupAdmin.of(
        JdbcDedupStore.builder(faulty)
            .retryInitialBackoff(RETRY_BACKOFF)
            .retryMaxBackoff(RETRY_BACKOFF)
            .build());
  }

  @Test
  void aForcedReleaseTriedAgainLeavesTheNextDeliverysClaimAlone() {
    DedupKey key = DedupKey.of("admin-lost", UUID.randomUUID().toString());
    ClaimResult.Claimed hung = claim(key, "hung-holder");
    try (FaultyDataSource faulty = FaultyDataSource.on(schema, 2, Duration.ofSeconds(5))) {
      DedupAdmin admin = adminOn(faulty);
      CompletableFuture<ClaimResult.Claimed> next = nextDeliveryAfterCommit(key, hung.token());
      faulty.loseCommitReplyOnce();

      DedupAdmin.Change change = admin.release(key, "ops", true);

      assertThat(faulty.repliesLost()).as("the release's commit reply was lost").isEqualTo(1);
      ClaimResult.Claimed nextClaim = next.join();
      assertThat(nextClaim.token()).isEqualTo(hung.token() + 1);
      assertThat(consumers.complete(nextClaim, RETENTION))
          .as("the next delivery's SUCCESS is written (its claim was not released as well)")
          .isTrue();
      assertThat(consumers.find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
      assertThat(change.applied()).isFalse();
      assertThat(change.message())
          .as("the operator is told the retry found a later claim")
          .contains("may have been made", "attempt " + nextClaim.token() + " of next-delivery");
    }
  }

  /**
   * The first try fails before its commit, and the holder gives its claim back (a poll's record it
   * never reached), counting its attempt back; the next delivery claims the key at that same
   * attempt. The retry must see another claim there, not the one the operator released.
   */
  @Test
  void aForcedReleaseTriedAgainLeavesAClaimMadeAtTheSameAttemptAfterAGiveBackAlone() {
    DedupKey key = DedupKey.of("admin-lost", UUID.randomUUID().toString());
    assertThat(consumers.fail(claim(key, "first-holder"), "downstream timed out", RETENTION))
        .isTrue();
    ClaimResult.Claimed seen = claim(key, "holder");
    try (FaultyDataSource faulty = FaultyDataSource.on(schema, 2, Duration.ofSeconds(5))) {
      DedupAdmin admin = adminOn(faulty);
      CompletableFuture<ClaimResult.Claimed> next =
          CompletableFuture.supplyAsync(
              () -> {
                await().atMost(Duration.ofSeconds(10)).until(() -> faulty.repliesLost() == 1);
                assertThat(consumers.release(seen)).as("the holder gave its claim back").isTrue();
                return claim(key, "holder");
              },
              nextDeliveries);
      faulty.loseReplyOnce("SET status = 'FAILED', lease_until = NULL, last_error = ?");

      DedupAdmin.Change change = admin.release(key, "ops", true);

      assertThat(faulty.repliesLost()).as("the release's first try lost its reply").isEqualTo(1);
      ClaimResult.Claimed nextClaim = next.join();
      assertThat(nextClaim.token()).as("the next claim's attempt").isEqualTo(seen.token());
      assertThat(consumers.complete(nextClaim, RETENTION))
          .as("the next delivery's SUCCESS is written (its claim was not released by the retry)")
          .isTrue();
      assertThat(change.applied()).isFalse();
    }
  }

  @Test
  void aForcedForgetTriedAgainLeavesTheNextDeliverysRecordAlone() {
    DedupKey key = DedupKey.of("admin-lost", UUID.randomUUID().toString());
    ClaimResult.Claimed hung = claim(key, "hung-holder");
    try (FaultyDataSource faulty = FaultyDataSource.on(schema, 2, Duration.ofSeconds(5))) {
      DedupAdmin admin = adminOn(faulty);
      CompletableFuture<ClaimResult.Claimed> next = nextDeliveryAfterCommit(key, hung.token());
      faulty.loseCommitReplyOnce();

      admin.forget(key, "ops", true);

      assertThat(faulty.repliesLost()).as("the forget's commit reply was lost").isEqualTo(1);
      ClaimResult.Claimed nextClaim = next.join();
      DedupRecord record = consumers.find(key).orElse(null);
      assertThat(record)
          .as(
              "the next delivery's claim (attempt %s) survives the retried forget",
              nextClaim.token())
          .isNotNull();
      assertThat(record.isLeaseLive()).isTrue();
    }
  }

  @Test
  void aReleaseTriedAgainAfterItsCommitSaysItReleasedTheKey() {
    DedupKey key = DedupKey.of("admin-lost", UUID.randomUUID().toString());
    ClaimResult.Claimed dead = claim(key, "dead-holder");
    try (FaultyDataSource faulty = FaultyDataSource.on(schema, 2, Duration.ofSeconds(5))) {
      DedupAdmin admin = adminOn(faulty);
      faulty.loseCommitReplyOnce();

      DedupAdmin.Change change = admin.release(key, "ops", true);

      assertThat(faulty.repliesLost()).as("the release's commit reply was lost").isEqualTo(1);
      DedupRecord record = consumers.find(key).orElseThrow();
      assertThat(record.status()).isEqualTo(DedupStatus.FAILED);
      assertThat(record.attempts()).isEqualTo(dead.token());
      assertThat(change.message())
          .as("the operator is told what the first try did")
          .startsWith("Released " + key);
      assertThat(change.applied()).isTrue();
      assertThat(change.before()).isNotNull();
      assertThat(change.before().status()).isEqualTo(DedupStatus.PROCESSING);
    }
  }

  @Test
  void aForgetTriedAgainAfterItsCommitSaysItForgotTheKey() {
    DedupKey key = DedupKey.of("admin-lost", UUID.randomUUID().toString());
    claim(key, "dead-holder");
    try (FaultyDataSource faulty = FaultyDataSource.on(schema, 2, Duration.ofSeconds(5))) {
      DedupAdmin admin = adminOn(faulty);
      faulty.loseCommitReplyOnce();

      DedupAdmin.Change change = admin.forget(key, "ops", true);

      assertThat(faulty.repliesLost()).as("the forget's commit reply was lost").isEqualTo(1);
      assertThat(consumers.find(key)).isEmpty();
      assertThat(change.message())
          .as("the operator is told what the first try did")
          .startsWith("Forgot " + key);
      assertThat(change.applied()).isTrue();
      assertThat(change.before()).isNotNull();
    }
  }
}
