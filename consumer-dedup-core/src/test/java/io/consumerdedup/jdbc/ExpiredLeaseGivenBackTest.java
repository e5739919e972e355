package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import java.time.Duration;
import java.util.List;
import java.util.UUID;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A claim that took over an expired lease and is given back without running its handler (its poll
 * cut short, or its attempt beyond maxAttempts) leaves the key to the attempt it took it from: the
 * earlier holder, still running, records its SUCCESS, and the key is not run again. Written as
 * FAILED under that attempt, the key refused the holder's SUCCESS as a lost lease, so its effect
 * was applied again by the next delivery. A holder whose key a live claim really holds, or that an
 * operator released, is still refused.
 */
class ExpiredLeaseGivenBackTest {
  private static final Duration SHORT_LEASE = Duration.ofSeconds(1);
  private static final Duration LEASE = Duration.ofMinutes(1);
  private static final Duration RETENTION = Duration.ofDays(1);

  @RegisterExtension static final TwoDatabases databases = new TwoDatabases("given_back");

  private static DedupKey newKey() {
    return DedupKey.of("given-back", UUID.randomUUID().toString());
  }

  private static ClaimRequest request(DedupKey key, String owner, Duration lease) {
    return new ClaimRequest(key, owner, lease, RETENTION, null, "orders-0@7");
  }

  /** Holder A's claim of {@code key} with a short lease, waited out by the database's clock. */
  private static ClaimResult.Claimed claimAndLetExpire(JdbcDedupStore store, DedupKey key) {
    ClaimResult.Claimed holder = claimed(store.claim(request(key, "consumer-a", SHORT_LEASE)));
    await()
        .atMost(Duration.ofSeconds(10))
        .pollInterval(Duration.ofMillis(50))
        .until(() -> !store.find(key).orElseThrow().isLeaseLive());
    return holder;
  }

  /** Consumer B's claim of the expired lease (in a poll's batch), given back unrun. */
  private static void takeOverAndGiveBack(JdbcDedupStore store, DedupKey key) {
    ClaimResult.Claimed takeover =
        claimed(store.claimAll(List.of(request(key, "consumer-b", LEASE))).get(0));
    assertThat(takeover.token()).as("B's claim, the next attempt").isEqualTo(2);
    assertThat(store.releaseAll(List.of(takeover))).as("keys B no longer held").isEmpty();
  }

  private static ClaimResult.Claimed claimed(ClaimResult result) {
    assertThat(result).isInstanceOf(ClaimResult.Claimed.class);
    return (ClaimResult.Claimed) result;
  }

  @ParameterizedTest
  @ValueSource(strings = {"postgres", "mariadb"})
  void theHolderWhoseExpiredLeaseWasTakenAndGivenBackRecordsItsSuccess(String database) {
    JdbcDedupStore store = JdbcDedupStore.builder(databases.dataSource(database)).build();
    DedupKey key = newKey();
    ClaimResult.Claimed holder = claimAndLetExpire(store, key);
    takeOverAndGiveBack(store, key);

    assertThat(store.complete(holder, RETENTION))
        .as("the SUCCESS of A, whose handler ran, after B gave its claim back")
        .isTrue();

    DedupRecord record = store.find(key).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(record.attempts()).isEqualTo(1);
    assertThat(store.claim(request(key, "consumer-c", LEASE)))
        .as("the next delivery of the key: a duplicate, not run again")
        .isInstanceOfSatisfying(
            ClaimResult.Taken.class,
            taken -> assertThat(taken.existing().status()).isEqualTo(DedupStatus.SUCCESS));
    assertThat(store.complete(holder, RETENTION))
        .as("A's SUCCESS sent again after its reply was lost")
        .isTrue();
  }

  @ParameterizedTest
  @ValueSource(strings = {"postgres", "mariadb"})
  void theHolderWhoseExpiredLeaseWasTakenAndGivenBackRecordsItsFailure(String database) {
    JdbcDedupStore store = JdbcDedupStore.builder(databases.dataSource(database)).build();
    DedupKey key = newKey();
    ClaimResult.Claimed holder = claimAndLetExpire(store, key);
    takeOverAndGiveBack(store, key);

    assertThat(store.fail(holder, "handler failed", RETENTION)).isTrue();

    DedupRecord record = store.find(key).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(record.lastError()).hasValue("handler failed");
  }

  @ParameterizedTest
  @ValueSource(strings = {"postgres", "mariadb"})
  void theHolderIsRefusedWhileTheTakeoverHoldsTheKey(String database) {
    JdbcDedupStore store = JdbcDedupStore.builder(databases.dataSource(database)).build();
    DedupKey key = newKey();
    ClaimResult.Claimed holder = claimAndLetExpire(store, key);
    ClaimResult.Claimed takeover = claimed(store.claim(request(key, "consumer-b", LEASE)));

    assertThat(store.complete(holder, RETENTION)).as("A's SUCCESS under B's claim").isFalse();

    DedupRecord record = store.find(key).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.PROCESSING);
    assertThat(record.owner()).isEqualTo("consumer-b");
    assertThat(store.complete(takeover, RETENTION)).isTrue();
  }

  @ParameterizedTest
  @ValueSource(strings = {"postgres", "mariadb"})
  void theHolderIsRefusedOnceAThirdConsumerClaimsTheGivenBackKey(String database) {
    JdbcDedupStore store = JdbcDedupStore.builder(databases.dataSource(database)).build();
    DedupKey key = newKey();
    ClaimResult.Claimed holder = claimAndLetExpire(store, key);
    takeOverAndGiveBack(store, key);
    ClaimResult.Claimed third = claimed(store.claim(request(key, "consumer-c", LEASE)));

    assertThat(store.complete(holder, RETENTION)).as("A's SUCCESS under C's claim").isFalse();
    assertThat(store.fail(holder, "late", RETENTION)).as("A's FAILED under C's claim").isFalse();
    assertThat(store.renew(holder, LEASE)).as("A's renewal under C's claim").isFalse();

    DedupRecord record = store.find(key).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.PROCESSING);
    assertThat(record.owner()).isEqualTo("consumer-c");
    assertThat(store.complete(third, RETENTION)).isTrue();
  }

  @ParameterizedTest
  @ValueSource(strings = {"postgres", "mariadb"})
  void aHolderAnOperatorReleasedStaysReleasedAfterATakeoverIsGivenBack(String database) {
    JdbcDedupStore store = JdbcDedupStore.builder(databases.dataSource(database)).build();
    DedupKey key = newKey();
    ClaimResult.Claimed holder = claimAndLetExpire(store, key);
    assertThat(JdbcDedupAdmin.of(store).release(key, "ops", false).applied()).isTrue();
    takeOverAndGiveBack(store, key);

    assertThat(store.complete(holder, RETENTION))
        .as("the SUCCESS of A, released by an operator")
        .isFalse();

    DedupRecord record = store.find(key).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(record.lastError())
        .hasValueSatisfying(note -> assertThat(note).startsWith("Released by ops"));
  }
}
