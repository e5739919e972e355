package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.testing.StoreFixture;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/** Every claim path and fenced state change of the PostgreSQL store, on a real server. */
class JdbcDedupStoreTest {
  private static final Duration LEASE = Duration.ofMinutes(1);
  private static final Duration RETENTION = Duration.ofDays(1);

  @RegisterExtension static final StoreFixture db = new StoreFixture("store", 4);

  private static ClaimRequest request(DedupKey key, String owner) {
    return new ClaimRequest(key, owner, LEASE, RETENTION, null, "orders-0@1");
  }

  private static ClaimResult.Claimed claimed(ClaimResult result) {
    assertThat(result).isInstanceOf(ClaimResult.Claimed.class);
    return (ClaimResult.Claimed) result;
  }

  private static ClaimResult.Taken taken(ClaimResult result) {
    assertThat(result).isInstanceOf(ClaimResult.Taken.class);
    return (ClaimResult.Taken) result;
  }

  @Test
  void aNewKeyIsClaimedWithTokenOneAndRecordedAsProcessing() {
    DedupKey key = DedupKey.of("payment", "new-1");

    ClaimResult.Claimed claim = claimed(db.store().claim(request(key, "consumer-a")));

    assertThat(claim.token()).isEqualTo(1);
    DedupRecord record = db.store().find(key).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.PROCESSING);
    assertThat(record.owner()).isEqualTo("consumer-a");
    assertThat(record.isLeaseLive()).isTrue();
    assertThat(record.source()).contains("orders-0@1");
  }

  @Test
  void aSucceededKeyIsNotClaimedAgain() {
    DedupKey key = DedupKey.of("payment", "done-1");
    ClaimResult.Claimed claim = claimed(db.store().claim(request(key, "consumer-a")));
    assertThat(db.store().complete(claim, RETENTION)).isTrue();

    ClaimResult.Taken again = taken(db.store().claim(request(key, "consumer-b")));

    assertThat(again.existing().status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(again.existing().attempts()).isEqualTo(1);
    assertThat(again.existing().owner()).isEqualTo("consumer-a");
  }

  @Test
  void aLiveLeaseKeepsOthersOut() {
    DedupKey key = DedupKey.of("payment", "live-1");
    claimed(db.store().claim(request(key, "consumer-a")));

    ClaimResult.Taken other = taken(db.store().claim(request(key, "consumer-b")));

    assertThat(other.existing().isLeaseLive()).isTrue();
    assertThat(other.existing().owner()).isEqualTo("consumer-a");
  }

  @Test
  void aFailedKeyIsRetriedWithTheNextToken() {
    DedupKey key = DedupKey.of("payment", "failed-1");
    ClaimResult.Claimed first = claimed(db.store().claim(request(key, "consumer-a")));
    assertThat(db.store().fail(first, "java.io.IOException: bank timeout", RETENTION)).isTrue();
    assertThat(db.store().find(key).orElseThrow().lastError())
        .contains("java.io.IOException: bank timeout");

    ClaimResult.Claimed retry = claimed(db.store().claim(request(key, "consumer-b")));

    assertThat(retry.token()).isEqualTo(2);
    DedupRecord record = db.store().find(key).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.PROCESSING);
    assertThat(record.owner()).isEqualTo("consumer-b");
  }

  @Test
  void anExpiredLeaseIsTakenOverAndTheOldHolderIsFencedOut() throws SQLException {
    DedupKey key = DedupKey.of("payment", "expired-1");
    ClaimResult.Claimed old = claimed(db.store().claim(request(key, "zombie")));
    expireLease(key);

    ClaimResult.Claimed takeover = claimed(db.store().claim(request(key, "consumer-b")));

    assertThat(takeover.token()).isEqualTo(2);
    assertThat(db.store().complete(old, RETENTION)).as("zombie's late SUCCESS").isFalse();
    assertThat(db.store().fail(old, "late", RETENTION)).as("zombie's late FAILED").isFalse();
    assertThat(db.store().renew(old, LEASE)).as("zombie's renewal").isFalse();
    DedupRecord record = db.store().find(key).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.PROCESSING);
    assertThat(record.owner()).isEqualTo("consumer-b");
    assertThat(db.store().complete(takeover, RETENTION)).isTrue();
    assertThat(db.store().find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
  }

  @Test
  void renewalExtendsTheLeaseByTheDatabaseClock() throws SQLException {
    DedupKey key = DedupKey.of("payment", "renew-1");
    ClaimResult.Claimed claim = claimed(db.store().claim(request(key, "consumer-a")));

    assertThat(db.store().renew(claim, Duration.ofHours(2))).isTrue();

    assertThat(secondsUntilLeaseEnds(key)).isBetween(7190.0, 7201.0);
  }

  @Test
  void aCompletionSentAgainSeesItsOwnWriteButNoOtherTokenOrOutcomeGetsIn() {
    DedupKey key = DedupKey.of("payment", "twice-1");
    ClaimResult.Claimed claim = claimed(db.store().claim(request(key, "consumer-a")));
    assertThat(db.store().complete(claim, RETENTION)).isTrue();

    // A retry whose first reply was lost: the SUCCESS under this token is its own.
    assertThat(db.store().complete(claim, RETENTION)).isTrue();
    assertThat(db.store().fail(claim, "late", RETENTION)).isFalse();
    assertThat(
            db.store()
                .complete(
                    new ClaimResult.Claimed(key, claim.token() + 1, claim.claimId()), RETENTION))
        .isFalse();
    assertThat(db.store().find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
  }

  @Test
  void aFailureSentAgainSeesItsOwnWriteButCannotTurnIntoSuccess() {
    DedupKey key = DedupKey.of("payment", "twice-2");
    ClaimResult.Claimed claim = claimed(db.store().claim(request(key, "consumer-a")));
    assertThat(db.store().fail(claim, "bank down", RETENTION)).isTrue();

    assertThat(db.store().fail(claim, "bank down", RETENTION)).isTrue();
    assertThat(db.store().complete(claim, RETENTION)).isFalse();
    assertThat(db.store().find(key).orElseThrow().status()).isEqualTo(DedupStatus.FAILED);
  }

  @Test
  void aDifferentFingerprintIsNotClaimedEvenAfterFailure() {
    DedupKey key = DedupKey.of("payment", "fp-1");
    ClaimResult.Claimed first =
        claimed(
            db.store().claim(new ClaimRequest(key, "a", LEASE, RETENTION, "fp-amount-10", null)));
    db.store().fail(first, "boom", RETENTION);

    ClaimResult.Taken other =
        taken(db.store().claim(new ClaimRequest(key, "b", LEASE, RETENTION, "fp-amount-99", null)));

    assertThat(other.existing().status()).isEqualTo(DedupStatus.FAILED);
    assertThat(other.existing().fingerprint()).contains("fp-amount-10");
    assertThat(
            claimed(
                    db.store()
                        .claim(new ClaimRequest(key, "b", LEASE, RETENTION, "fp-amount-10", null)))
                .token())
        .isEqualTo(2);
  }

  @Test
  void purgeDeletesOnlyExpiredRecordsAndNeverALiveLease() throws SQLException {
    String type = "purge";
    for (int i = 0; i < 25; i++) {
      DedupKey key = DedupKey.of(type, "old-" + i);
      ClaimResult.Claimed claim = claimed(db.store().claim(request(key, "a")));
      db.store().complete(claim, Duration.ofMillis(1));
    }
    DedupKey kept = DedupKey.of(type, "kept");
    db.store().complete(claimed(db.store().claim(request(kept, "a"))), RETENTION);
    DedupKey running = DedupKey.of(type, "running");
    claimed(db.store().claim(request(running, "a")));
    execute(
        "UPDATE consumer_dedup SET expires_at = now() - interval '1 minute' WHERE biz_key = 'running'");

    int first = db.store().purge(10);
    int total = first;
    int deleted;
    while ((deleted = db.store().purge(10)) > 0) {
      total += deleted;
    }

    assertThat(first).isEqualTo(10);
    assertThat(total).isGreaterThanOrEqualTo(25);
    assertThat(db.store().find(kept)).isPresent();
    assertThat(db.store().find(running)).as("live lease past its expiry is kept").isPresent();
    assertThat(db.store().find(DedupKey.of(type, "old-0"))).isEmpty();
  }

  @Test
  void timesAreTheDatabasesInAnyJvmAndSessionTimeZone() throws SQLException {
    DedupKey key = DedupKey.of("payment", "tz-1");
    claimed(db.store().claim(request(key, "a")));
    try (Connection connection = db.dataSource().getConnection();
        Statement statement = connection.createStatement()) {
      statement.execute("SET TIME ZONE 'Pacific/Kiritimati'");
      try (ResultSet row =
          statement.executeQuery(
              "SELECT extract(epoch FROM lease_until - now()) FROM consumer_dedup WHERE biz_key = 'tz-1'")) {
        row.next();
        assertThat(row.getDouble(1)).isBetween(50.0, 61.0);
      }
      statement.execute("RESET TIME ZONE");
    }
  }

  @Test
  void aTableNameThatIsNotAnIdentifierIsRefused() {
    assertThatThrownBy(
            () -> JdbcDedupStore.builder(db.dataSource()).tableName("dedup; DROP TABLE x"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("tableName must be an unquoted SQL identifier")
        .hasMessageContaining("'dedup; DROP TABLE x'");
    assertThat(
            JdbcDedupStore.builder(db.dataSource())
                .tableName("billing.consumer_dedup")
                .build()
                .tableName())
        .isEqualTo("billing.consumer_dedup");
  }

  @Test
  void aMissingTableFailsAtOnceNamingTheTable() {
    JdbcDedupStore wrong =
        JdbcDedupStore.builder(db.dataSource()).tableName("no_such_table").build();

    assertThatThrownBy(() -> wrong.claim(request(DedupKey.of("payment", "x"), "a")))
        .isInstanceOf(DedupStoreException.class)
        .hasMessageContaining("claim on table no_such_table failed")
        .hasMessageContaining("42P01")
        .hasMessageContaining("payment/x");
  }

  private static void expireLease(DedupKey key) throws SQLException {
    try (Connection connection = db.dataSource().getConnection();
        PreparedStatement statement =
            connection.prepareStatement(
                "UPDATE consumer_dedup SET lease_until = now() - interval '1 second'"
                    + " WHERE biz_type = ? AND biz_key = ?")) {
      statement.setString(1, key.bizType());
      statement.setString(2, key.bizKey());
      assertThat(statement.executeUpdate()).isEqualTo(1);
    }
  }

  private static double secondsUntilLeaseEnds(DedupKey key) throws SQLException {
    try (Connection connection = db.dataSource().getConnection();
        PreparedStatement statement =
            connection.prepareStatement(
                "SELECT extract(epoch FROM lease_until - now()) FROM consumer_dedup"
                    + " WHERE biz_type = ? AND biz_key = ?")) {
      statement.setString(1, key.bizType());
      statement.setString(2, key.bizKey());
      try (ResultSet row = statement.executeQuery()) {
        row.next();
        return row.getDouble(1);
      }
    }
  }

  private static void execute(String sql) throws SQLException {
    try (Connection connection = db.dataSource().getConnection();
        Statement statement = connection.createStatement()) {
      statement.execute(sql);
    }
  }
}
