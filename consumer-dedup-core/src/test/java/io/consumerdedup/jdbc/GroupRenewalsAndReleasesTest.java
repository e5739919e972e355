package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.testing.PlanningTable;
import io.consumerdedup.testing.PlanningTable.Scans;
import io.consumerdedup.testing.TestDatabase;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.stream.IntStream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * A group's lease renewals (the lease keeper of a poll's claims) and releases (claims given back on
 * hold, rebalance or an Error) find each key through the primary key whatever the planner knows of
 * the table. Counted by PostgreSQL itself ({@code pg_stat_user_tables}): a group of 500 keys on a
 * table of 100k rows that was never analyzed, or whose statements the store's connection planned
 * while the table was empty, starts no sequential scan of the table and an index scan per key. The
 * earlier {@code UPDATE}/{@code DELETE ... FROM unnest(...)} were planned there as a hash join over
 * a sequential scan of the whole table, which every group then read.
 */
class GroupRenewalsAndReleasesTest {
  private static final int GROUP = 500;
  private static final int ROWS = 100_000;
  private static final Duration LEASE = Duration.ofMinutes(5);

  private PlanningTable table;
  private HikariDataSource pool;
  private JdbcDedupStore store;
  private Connection connection;

  @BeforeEach
  void setUp() throws SQLException {
    table = new PlanningTable("groups");
    // One connection: the store's statements are planned, and cached, in one session.
    pool = TestDatabase.dataSource(table.schema(), 1);
    store = JdbcDedupStore.builder(pool).build();
    connection = table.connection();
  }

  @AfterEach
  void tearDown() throws SQLException {
    try {
      pool.close();
    } finally {
      table.close();
    }
  }

  @Test
  void onATableNeverAnalyzedAGroupIsRenewedAndReleasedKeyByKey() throws SQLException {
    grow();
    assertThat(table.statistics()).as("the table has no planner statistics").isZero();

    renewAndReleaseByKey();
  }

  @Test
  void statementsPlannedWhileTheTableWasEmptyStillProbeEachKeyOnceItHasGrown() throws SQLException {
    // More often than pgjdbc takes to name a statement and the server to keep a generic plan.
    for (int i = 0; i < 12; i++) {
      assertThat(store.renewAll(held(), LEASE)).hasSize(GROUP);
      assertThat(store.releaseAll(held())).hasSize(GROUP);
    }
    grow();

    renewAndReleaseByKey();
  }

  /**
   * A renewal that meets a row another consumer is taking over waits for it and judges the row as
   * it is once that commits: the lease is lost, and the new holder's lease is untouched. A row
   * changed meanwhile under the same token is renewed.
   */
  @Test
  void aRenewalWaitingOnAConcurrentChangeJudgesTheRowAsItIsNow() throws Exception {
    List<ClaimResult.Claimed> claims = held().subList(0, 4);
    insertHeld(claims);
    DedupKey takenOver = claims.get(0).key();
    DedupKey touched = claims.get(2).key();
    int storeBackend;
    try (Connection storeConnection = pool.getConnection();
        Statement statement = storeConnection.createStatement();
        ResultSet row = statement.executeQuery("SELECT pg_backend_pid()")) {
      row.next();
      storeBackend = row.getInt(1);
    }
    try (Connection other = TestDatabase.connect(table.schema())) {
      other.setAutoCommit(false);
      try (Statement statement = other.createStatement()) {
        statement.executeUpdate(
            "UPDATE consumer_dedup SET attempts = attempts + 1, claim_id = 'takeover',"
                + " lease_until = now() + interval '1 hour'"
                + byKey(takenOver));
        statement.executeUpdate("UPDATE consumer_dedup SET owner = 'touched'" + byKey(touched));
      }
      CompletableFuture<List<DedupKey>> renewal =
          CompletableFuture.supplyAsync(() -> store.renewAll(claims, LEASE));
      await().atMost(Duration.ofSeconds(30)).until(() -> blocked(storeBackend));
      other.commit();

      assertThat(renewal.get(30, TimeUnit.SECONDS)).containsExactly(takenOver);
    }
    DedupRecord takeover = store.find(takenOver).orElseThrow();
    assertThat(takeover.attempts()).isEqualTo(2);
    assertThat(takeover.leaseUntil().orElseThrow())
        .as("the new holder's lease")
        .isAfter(Instant.now().plus(Duration.ofMinutes(30)));
    assertThat(store.find(touched).orElseThrow().leaseUntil().orElseThrow())
        .as("renewed under the same token")
        .isAfter(Instant.now().plus(Duration.ofMinutes(4)));
  }

  /**
   * Renews, then releases, the group, each counted by the table's scan statistics: no sequential
   * scan, an index scan per key. Every key is answered: two of them no longer held.
   */
  private void renewAndReleaseByKey() throws SQLException {
    List<ClaimResult.Claimed> claims = held();
    insertHeld(claims);
    // Another consumer took one key over; another claim of the same token holds a second one.
    ClaimResult.Claimed stale = claims.get(7);
    ClaimResult.Claimed foreign = claims.get(8);
    table.execute("UPDATE consumer_dedup SET attempts = attempts + 1" + byKey(stale.key()));
    table.execute("UPDATE consumer_dedup SET claim_id = 'other'" + byKey(foreign.key()));

    Scans beforeRenewal = table.scans(pool);
    assertThat(store.renewAll(claims, LEASE)).containsExactly(stale.key(), foreign.key());
    Scans renewal = table.scans(pool).since(beforeRenewal);
    assertThat(renewal.index())
        .as("index scans of a group's renewal")
        .isGreaterThanOrEqualTo(GROUP);
    assertThat(renewal.sequential()).as("sequential scans of a group's renewal").isZero();
    // Read between the counted calls: it scans the table.
    assertThat(count("status = 'PROCESSING' AND lease_until > now() + interval '4 minutes'"))
        .as("claims renewed")
        .isEqualTo(GROUP - 2);

    Scans beforeRelease = table.scans(pool);
    assertThat(store.releaseAll(claims)).containsExactly(stale.key(), foreign.key());
    Scans release = table.scans(pool).since(beforeRelease);
    assertThat(release.index())
        .as("index scans of a group's release")
        .isGreaterThanOrEqualTo(GROUP);
    assertThat(release.sequential()).as("sequential scans of a group's release").isZero();

    // Read only now: these scan the table.
    assertThat(count("status = 'PROCESSING'")).as("claims left").isEqualTo(2);
    // Claims with token 1 created their key: deleted. Re-claims go back to FAILED, uncounted.
    assertThat(count("biz_key LIKE 'held-%'")).isEqualTo(GROUP / 2 + 1);
    DedupRecord restored = store.find(claims.get(1).key()).orElseThrow();
    assertThat(restored.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(restored.attempts()).isEqualTo(1);
  }

  private static String byKey(DedupKey key) {
    return " WHERE biz_type = '" + key.bizType() + "' AND biz_key = '" + key.bizKey() + "'";
  }

  /** The group: even keys claimed once (token 1), odd ones a second time (token 2). */
  private static List<ClaimResult.Claimed> held() {
    return IntStream.range(0, GROUP)
        .mapToObj(
            i -> new ClaimResult.Claimed(DedupKey.of("order", "held-" + i), 1 + i % 2, "c-" + i))
        .toList();
  }

  private void insertHeld(List<ClaimResult.Claimed> claims) throws SQLException {
    List<String> rows = new ArrayList<>();
    for (ClaimResult.Claimed claim : claims) {
      rows.add(
          "('order', '"
              + claim.key().bizKey()
              + "', 'PROCESSING', "
              + claim.token()
              + ", 'consumer-a', now() + interval '1 minute', now() + interval '7 days', '"
              + claim.claimId()
              + "')");
    }
    table.execute(
        "INSERT INTO consumer_dedup (biz_type, biz_key, status, attempts, owner, lease_until,"
            + " expires_at, claim_id) VALUES "
            + String.join(", ", rows));
  }

  /** Fills the table with {@link #ROWS} settled rows, as a grown table holds them. */
  private void grow() throws SQLException {
    table.execute(
        "INSERT INTO consumer_dedup (biz_type, biz_key, status, owner, expires_at)"
            + " SELECT 'order', 'k-' || g, 'SUCCESS', 'consumer-a', now() + interval '7 days'"
            + " FROM generate_series(1, "
            + ROWS
            + ") g");
  }

  /** The table's scan counters. */
  private int count(String condition) throws SQLException {
    try (Statement statement = connection.createStatement();
        ResultSet row =
            statement.executeQuery("SELECT count(*) FROM consumer_dedup WHERE " + condition)) {
      row.next();
      return row.getInt(1);
    }
  }

  /** Whether {@code backend} waits for a lock another transaction holds. */
  private boolean blocked(int backend) throws SQLException {
    try (Statement statement = connection.createStatement();
        ResultSet row =
            statement.executeQuery("SELECT cardinality(pg_blocking_pids(" + backend + ")) > 0")) {
      row.next();
      return row.getBoolean(1);
    }
  }
}
