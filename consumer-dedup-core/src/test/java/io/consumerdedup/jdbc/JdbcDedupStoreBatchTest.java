package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.testing.StoreFixture;
import io.consumerdedup.testing.TestDatabase;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.stream.IntStream;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The batch calls of the PostgreSQL store: one statement answers every kind of key at once, a
 * duplicate is answered without writing, and status changes leave the indexes alone (HOT).
 */
class JdbcDedupStoreBatchTest {
  private static final Duration LEASE = Duration.ofMinutes(1);
  private static final Duration RETENTION = Duration.ofDays(1);

  @RegisterExtension static final StoreFixture db = new StoreFixture("batch", 4);

  private static ClaimRequest request(DedupKey key, @Nullable String fingerprint) {
    return new ClaimRequest(key, "consumer-a", LEASE, RETENTION, fingerprint, "orders-0@1");
  }

  private static ClaimResult.Claimed claimOne(DedupKey key) {
    return (ClaimResult.Claimed) db.store().claim(request(key, null));
  }

  @Test
  void oneBatchAnswersEveryKindOfKeyInRequestOrder() throws SQLException {
    DedupKey done = DedupKey.of("order", "b-done");
    db.store().complete(claimOne(done), RETENTION);
    DedupKey held = DedupKey.of("order", "b-held");
    claimOne(held);
    DedupKey failed = DedupKey.of("order", "b-failed");
    db.store().fail(claimOne(failed), "boom", RETENTION);
    DedupKey expired = DedupKey.of("order", "b-expired");
    claimOne(expired);
    expireLease(expired);
    DedupKey other = DedupKey.of("order", "b-other-payload");
    db.store()
        .fail((ClaimResult.Claimed) db.store().claim(request(other, "fp-1")), "boom", RETENTION);
    DedupKey fresh = DedupKey.of("order", "b-new");

    List<ClaimResult> results =
        db.store()
            .claimAll(
                List.of(
                    request(fresh, null),
                    request(done, null),
                    request(held, null),
                    request(fresh, null), // a later copy in the same batch
                    request(failed, null),
                    request(expired, null),
                    request(other, "fp-2")));

    assertThat(results)
        .extracting(ClaimResult::key)
        .containsExactly(fresh, done, held, failed, expired, other);
    assertThat(results.get(0)).isEqualTo(new ClaimResult.Claimed(fresh, 1, claimIdOf(results, 0)));
    assertThat(taken(results.get(1)).status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(taken(results.get(2)).isLeaseLive()).isTrue();
    assertThat(((ClaimResult.Claimed) results.get(3)).token())
        .as("retry after FAILED")
        .isEqualTo(2);
    assertThat(((ClaimResult.Claimed) results.get(4)).token()).as("takeover").isEqualTo(2);
    assertThat(taken(results.get(5)).fingerprint()).contains("fp-1");
    assertThat(db.store().find(fresh).orElseThrow().status()).isEqualTo(DedupStatus.PROCESSING);
  }

  @Test
  void aDuplicateIsAnsweredWithoutLockingOrWritingItsRow() throws SQLException {
    DedupKey done = DedupKey.of("order", "read-only");
    db.store().complete(claimOne(done), RETENTION);
    long versionBefore = rowVersion(done);
    // A SUCCESS written for a group (ON CONFLICT DO UPDATE) leaves its own transaction in xmax.
    long lockerBefore = lockerOf(done);

    ClaimResult again = db.store().claim(request(done, null));

    assertThat(again).isInstanceOf(ClaimResult.Taken.class);
    // A row lock (what ON CONFLICT DO UPDATE ... WHERE takes even when it changes nothing) would
    // set xmax to the claim's transaction, which would need a commit record: the claim wrote
    // neither.
    assertThat(lockerOf(done)).as("xmax of the SUCCESS row").isEqualTo(lockerBefore);
    assertThat(rowVersion(done)).isEqualTo(versionBefore);
  }

  @Test
  void completeFailRenewAndReleaseAnswerTheKeysTheyNoLongerHold() throws SQLException {
    List<DedupKey> keys =
        IntStream.range(0, 4).mapToObj(i -> DedupKey.of("order", "fenced-" + i)).toList();
    List<ClaimResult.Claimed> claims =
        db.store().claimAll(keys.stream().map(key -> request(key, null)).toList()).stream()
            .map(ClaimResult.Claimed.class::cast)
            .toList();
    expireLease(keys.get(3));
    ClaimResult.Claimed takeover = claimOne(keys.get(3));

    assertThat(db.store().renewAll(claims, LEASE)).containsExactly(keys.get(3));
    assertThat(db.store().completeAll(claims.subList(0, 2), RETENTION)).isEmpty();
    assertThat(
            db.store()
                .failAll(
                    List.of(
                        new DedupStore.Failure(claims.get(2), "boom\u0000"),
                        new DedupStore.Failure(claims.get(3), "late")),
                    RETENTION))
        .containsExactly(keys.get(3));
    // Sent again after a lost reply: each still counts as written.
    assertThat(db.store().completeAll(claims.subList(0, 2), RETENTION)).isEmpty();

    assertThat(db.store().find(keys.get(0)).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
    DedupRecord failed = db.store().find(keys.get(2)).orElseThrow();
    assertThat(failed.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(failed.lastError()).contains("boom\\0");
    DedupRecord takenOver = db.store().find(keys.get(3)).orElseThrow();
    assertThat(takenOver.status()).isEqualTo(DedupStatus.PROCESSING);
    assertThat(takenOver.attempts()).isEqualTo(takeover.token());
  }

  @Test
  void aReleasedClaimLeavesTheKeyAsIfItHadNotHappened() throws SQLException {
    DedupKey fresh = DedupKey.of("order", "release-new");
    DedupKey retried = DedupKey.of("order", "release-retried");
    db.store().fail(claimOne(retried), "first try failed", RETENTION);
    List<ClaimResult.Claimed> claims =
        db.store().claimAll(List.of(request(fresh, null), request(retried, null))).stream()
            .map(ClaimResult.Claimed.class::cast)
            .toList();
    assertThat(claims.get(1).token()).isEqualTo(2);

    assertThat(db.store().releaseAll(claims)).isEmpty();

    assertThat(db.store().find(fresh)).as("a key the claim created").isEmpty();
    DedupRecord restored = db.store().find(retried).orElseThrow();
    assertThat(restored.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(restored.attempts()).as("the released claim is not an attempt").isEqualTo(1);
    assertThat(restored.lastError()).contains("first try failed");
    // Released twice (the first reply lost) after another consumer claimed the key again: the
    // later claim is untouched, and the old token writes nothing.
    ClaimResult.Claimed next = claimOne(retried);
    assertThat(next.token()).isEqualTo(2);
    assertThat(db.store().releaseAll(claims)).containsExactly(fresh, retried);
    DedupRecord reclaimed = db.store().find(retried).orElseThrow();
    assertThat(reclaimed.status()).isEqualTo(DedupStatus.PROCESSING);
    assertThat(reclaimed.isLeaseLive()).isTrue();
  }

  @Test
  void statusChangesAreHotUpdatesThatWriteNoIndexEntry() throws Exception {
    // A table of its own, so that no other test's updates or full pages blur the count.
    String ownSchema = TestDatabase.newSchema("hot");
    try (HikariDataSource own = TestDatabase.dataSource(ownSchema, 2)) {
      JdbcDedupStore hotStore = JdbcDedupStore.builder(own).build();
      List<ClaimResult.Claimed> claims = new ArrayList<>();
      for (int i = 0; i < 5; i++) {
        claims.add(
            (ClaimResult.Claimed) hotStore.claim(request(DedupKey.of("order", "hot-" + i), null)));
      }
      hotStore.renewAll(claims, LEASE);
      hotStore.completeAll(claims, RETENTION);

      // 5 renewals and 5 completions. With an index on expires_at (which a completion sets) the
      // completions were not HOT. Statistics reach the view within seconds.
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
      while (statistic(own, "n_tup_upd") < 10 && System.nanoTime() < deadline) {
        Thread.sleep(200);
      }
      assertThat(statistic(own, "n_tup_upd")).isEqualTo(10);
      assertThat(statistic(own, "n_tup_hot_upd")).isEqualTo(10);
    } finally {
      TestDatabase.dropSchema(ownSchema);
    }
  }

  @Test
  void aPollsSuccessMarksAreHotUpdatesThoughItsClaimsFilledTheirPages() throws Exception {
    String ownSchema = TestDatabase.newSchema("hotpoll");
    try (HikariDataSource own = TestDatabase.dataSource(ownSchema, 2)) {
      JdbcDedupStore pollStore = JdbcDedupStore.builder(own).build();
      List<ClaimRequest> requests = new ArrayList<>();
      for (int i = 0; i < 500; i++) {
        requests.add(request(DedupKey.of("order", "poll-" + i), null));
      }
      List<ClaimResult.Claimed> claims =
          pollStore.claimAll(requests).stream().map(ClaimResult.Claimed.class::cast).toList();
      assertThat(pollStore.completeAll(claims, RETENTION)).isEmpty();

      // The claims are fresh rows, packed together on the table's last pages; each SUCCESS is a
      // new version of its row, HOT only if it fits on the row's page. With fillfactor 80 about
      // half of them did not: each wrote an entry into both indexes, and more WAL.
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
      while (statistic(own, "n_tup_upd") < 500 && System.nanoTime() < deadline) {
        Thread.sleep(200);
      }
      assertThat(statistic(own, "n_tup_upd")).isEqualTo(500);
      assertThat(statistic(own, "n_tup_hot_upd"))
          .as("[SUCCESS marks of a poll that wrote no index entry]")
          .isEqualTo(500);
    } finally {
      TestDatabase.dropSchema(ownSchema);
    }
  }

  private static String claimIdOf(List<ClaimResult> results, int index) {
    return ((ClaimResult.Claimed) results.get(index)).claimId();
  }

  private static DedupRecord taken(ClaimResult result) {
    assertThat(result).isInstanceOf(ClaimResult.Taken.class);
    return ((ClaimResult.Taken) result).existing();
  }

  private static void expireLease(DedupKey key) throws SQLException {
    update(
        "UPDATE consumer_dedup SET lease_until = now() - interval '1 second'"
            + " WHERE biz_type = ? AND biz_key = ?",
        key);
  }

  private static long lockerOf(DedupKey key) throws SQLException {
    return Long.parseLong(query("SELECT xmax::text FROM consumer_dedup", key).orElseThrow());
  }

  private static long rowVersion(DedupKey key) throws SQLException {
    return Long.parseLong(query("SELECT xmin::text FROM consumer_dedup", key).orElseThrow());
  }

  private static long statistic(HikariDataSource tableSource, String column) throws SQLException {
    try (Connection connection = tableSource.getConnection();
        PreparedStatement statement =
            connection.prepareStatement(
                "SELECT "
                    + column
                    + " FROM pg_stat_user_tables WHERE relname = 'consumer_dedup'"
                    + " AND schemaname = current_schema()")) {
      try (ResultSet row = statement.executeQuery()) {
        return row.next() ? row.getLong(1) : 0;
      }
    }
  }

  private static Optional<String> query(String select, DedupKey key) throws SQLException {
    try (Connection connection = db.dataSource().getConnection();
        PreparedStatement statement =
            connection.prepareStatement(select + " WHERE biz_type = ? AND biz_key = ?")) {
      statement.setString(1, key.bizType());
      statement.setString(2, key.bizKey());
      try (ResultSet row = statement.executeQuery()) {
        return row.next() ? Optional.of(row.getString(1)) : Optional.empty();
      }
    }
  }

  private static void update(String sql, DedupKey key) throws SQLException {
    try (Connection connection = db.dataSource().getConnection();
        PreparedStatement statement = connection.prepareStatement(sql)) {
      statement.setString(1, key.bizType());
      statement.setString(2, key.bizKey());
      assertThat(statement.executeUpdate()).isEqualTo(1);
    }
  }
}
