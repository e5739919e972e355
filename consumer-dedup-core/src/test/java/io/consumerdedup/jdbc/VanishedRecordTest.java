package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupInProgressException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.InProgressPolicy;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.core.internal.LeaseRenewer;
import io.consumerdedup.testing.InterceptedStore;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A record that vanishes under its holder (a failover to a standby that had not received it, an
 * operator's DELETE, a purge; here a DELETE on a real database) is reported as gone, not as a
 * takeover: the holder's SUCCESS or FAILED is written again under its claim, a renewal says the
 * record vanished, and a later claim that creates the record anew says so at WARN. A key claimed
 * anew meanwhile stays its new holder's, though that claim starts again at the vanished one's
 * token.
 */
class VanishedRecordTest {
  private static final Duration LEASE = Duration.ofMinutes(1);
  private static final Duration RETENTION = Duration.ofDays(1);

  @RegisterExtension static final TwoDatabases databases = new TwoDatabases("vanished");

  @RegisterExtension
  final CapturedWarnings logs =
      new CapturedWarnings(
          JdbcDedupStore.class.getName(),
          LeaseRenewer.class.getName(),
          IdempotentExecutor.class.getName());

  private static DedupKey newKey() {
    return DedupKey.of("vanish", UUID.randomUUID().toString());
  }

  private static ClaimResult.Claimed claim(JdbcDedupStore store, DedupKey key) {
    ClaimResult result =
        store.claim(new ClaimRequest(key, "holder", LEASE, RETENTION, null, "orders-0@7"));
    assertThat(result).isInstanceOf(ClaimResult.Claimed.class);
    return (ClaimResult.Claimed) result;
  }

  private static void delete(DataSource dataSource, DedupKey key) throws SQLException {
    try (Connection connection = dataSource.getConnection();
        PreparedStatement delete =
            connection.prepareStatement(
                "DELETE FROM consumer_dedup WHERE biz_type = ? AND biz_key = ?")) {
      delete.setString(1, key.bizType());
      delete.setString(2, key.bizKey());
      assertThat(delete.executeUpdate()).as("the record was deleted").isEqualTo(1);
    }
  }

  /** Backends whose outcome insert waits for a lock (another transaction's row of its key). */
  private int insertsWaitingForALock() throws SQLException {
    try (Connection connection = databases.postgres().getConnection();
        PreparedStatement waiting =
            connection.prepareStatement(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    + " AND query LIKE 'INSERT INTO %ON CONFLICT (biz_type, biz_key)%'");
        ResultSet rows = waiting.executeQuery()) {
      rows.next();
      return rows.getInt(1);
    }
  }

  @ParameterizedTest
  @ValueSource(strings = {"postgres", "mariadb"})
  void aSuccessWhoseRecordVanishedIsWrittenAgainUnderTheHoldersToken(String database)
      throws SQLException {
    JdbcDedupStore store = JdbcDedupStore.builder(databases.dataSource(database)).build();
    DedupKey key = newKey();
    ClaimResult.Claimed claim = claim(store, key);
    delete(databases.dataSource(database), key);

    assertThat(store.complete(claim, RETENTION)).isTrue();

    DedupRecord record = store.find(key).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(record.attempts()).isEqualTo(claim.token());
    assertThat(record.expiresAt()).isAfter(Instant.now().plus(RETENTION).minusSeconds(60));
    assertThat(logs.containing("had vanished")).singleElement().asString().contains(key.toString());
    assertThat(logs.containing("taken over")).isEmpty();
  }

  /**
   * Two threads of the holder write the same outcome of a vanished record at once (the outcome
   * writer retrying a poll's marks, and the claim of the record's redelivery writing the kept
   * outcome first): the second insert meets the first one's row. It was taken for a claim anew, and
   * the holder reported its lease taken over though the SUCCESS in place was its own. Here the
   * first insert is held open on another connection while the store's completion waits on it.
   */
  @Test
  void aVanishedSuccessWrittenAgainByTwoThreadsOfTheHolderAtOnceIsNoTakeover() throws Exception {
    JdbcDedupStore store = JdbcDedupStore.builder(databases.postgres()).build();
    DedupKey key = newKey();
    ClaimResult.Claimed claim = claim(store, key);
    delete(databases.postgres(), key);
    try (Connection other = databases.postgres().getConnection()) {
      other.setAutoCommit(false);
      try (PreparedStatement insert =
          other.prepareStatement(
              "INSERT INTO consumer_dedup (biz_type, biz_key, status, attempts, owner, created_at,"
                  + " updated_at, expires_at, claim_id) VALUES (?, ?, 'SUCCESS', ?, 'holder',"
                  + " now(), now(), now() + interval '1 day', ?)")) {
        insert.setString(1, key.bizType());
        insert.setString(2, key.bizKey());
        insert.setInt(3, claim.token());
        insert.setString(4, claim.claimId());
        insert.executeUpdate();
      }
      CompletableFuture<Boolean> completed =
          CompletableFuture.supplyAsync(() -> store.complete(claim, RETENTION));
      await()
          .atMost(Duration.ofSeconds(10))
          .until(() -> insertsWaitingForALock() > 0 || completed.isDone());
      assertThat(completed).as("the completion, waiting for the other thread's insert").isNotDone();
      other.commit();
      assertThat(completed.get(10, TimeUnit.SECONDS))
          .as("whether the holder's SUCCESS counts as written")
          .isTrue();
    }
    assertThat(store.find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(logs.containing("taken over")).isEmpty();
  }

  /**
   * MySQL and MariaDB: the same two threads, each past its fenced update (no record) before either
   * inserts. The insert that came second was ignored on the first one's row, and read as a claim
   * anew: the holder reported its lease taken over though the outcome in place was its own. Here
   * each thread waits for the other at its insert.
   */
  @ParameterizedTest
  @ValueSource(strings = {"SUCCESS", "FAILED"})
  void aVanishedOutcomeWrittenAgainByTwoThreadsOfTheHolderAtOnceIsNoTakeoverOnMariaDb(
      String outcome) throws Exception {
    JdbcDedupStore plain = JdbcDedupStore.builder(databases.mariaDb()).build();
    DedupKey key = newKey();
    ClaimResult.Claimed claim = claim(plain, key);
    delete(databases.mariaDb(), key);
    CyclicBarrier bothPastTheirUpdate = new CyclicBarrier(2);
    JdbcDedupStore store =
        JdbcDedupStore.builder(meetingAtTheInsert(databases.mariaDb(), bothPastTheirUpdate))
            .build();
    Callable<Boolean> write =
        () ->
            outcome.equals("SUCCESS")
                ? store.complete(claim, RETENTION)
                : store.fail(claim, "card network timeout", RETENTION);
    ExecutorService threads = Executors.newFixedThreadPool(2);
    try {
      List<Future<Boolean>> written = threads.invokeAll(List.of(write, write));
      assertThat(List.of(written.get(0).get(), written.get(1).get()))
          .as("whether each thread's %s counts as written", outcome)
          .containsExactly(true, true);
    } finally {
      threads.shutdownNow();
    }
    assertThat(plain.find(key).orElseThrow().status()).hasToString(outcome);
    assertThat(logs.containing("taken over")).isEmpty();
  }

  /**
   * {@code dataSource}, whose connections wait at the preparing of an {@code INSERT IGNORE} until
   * two of them are there.
   */
  private static DataSource meetingAtTheInsert(DataSource dataSource, CyclicBarrier meeting) {
    return (DataSource)
        Proxy.newProxyInstance(
            DataSource.class.getClassLoader(),
            new Class<?>[] {DataSource.class},
            (proxy, method, args) -> {
              Object result = invoke(dataSource, method, args);
              if (!method.getName().equals("getConnection")) {
                return result;
              }
              Connection connection = (Connection) result;
              return Proxy.newProxyInstance(
                  Connection.class.getClassLoader(),
                  new Class<?>[] {Connection.class},
                  (self, call, callArgs) -> {
                    if (call.getName().equals("prepareStatement")
                        && ((String) callArgs[0]).startsWith("INSERT IGNORE")) {
                      meeting.await(10, TimeUnit.SECONDS);
                    }
                    return invoke(connection, call, callArgs);
                  });
            });
  }

  private static Object invoke(Object target, java.lang.reflect.Method method, Object[] args)
      throws Throwable {
    try {
      return method.invoke(target, args);
    } catch (InvocationTargetException e) {
      throw e.getCause();
    }
  }

  @ParameterizedTest
  @ValueSource(strings = {"postgres", "mariadb"})
  void aFailureWhoseRecordVanishedIsWrittenAgainWithItsError(String database) throws SQLException {
    JdbcDedupStore store = JdbcDedupStore.builder(databases.dataSource(database)).build();
    DedupKey key = newKey();
    ClaimResult.Claimed claim = claim(store, key);
    delete(databases.dataSource(database), key);

    assertThat(store.fail(claim, "boom", RETENTION)).isTrue();

    DedupRecord record = store.find(key).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(record.attempts()).isEqualTo(claim.token());
    assertThat(record.lastError()).contains("boom");
  }

  @ParameterizedTest
  @ValueSource(strings = {"postgres", "mariadb"})
  void inABatchOnlyTheVanishedRecordsAreWrittenAgainAndATakeoverStaysLost(String database)
      throws SQLException {
    JdbcDedupStore store = JdbcDedupStore.builder(databases.dataSource(database)).build();
    DedupKey kept = newKey();
    DedupKey vanished = newKey();
    DedupKey takenOver = newKey();
    ClaimResult.Claimed keptClaim = claim(store, kept);
    ClaimResult.Claimed vanishedClaim = claim(store, vanished);
    // The holder's attempt 2 vanishes, and another consumer claims the key anew (attempt 1).
    ClaimResult.Claimed first = claim(store, takenOver);
    assertThat(store.fail(first, "first try", RETENTION)).isTrue();
    ClaimResult.Claimed second = claim(store, takenOver);
    delete(databases.dataSource(database), takenOver);
    ClaimResult.Claimed rival = claim(store, takenOver);
    delete(databases.dataSource(database), vanished);

    List<DedupKey> lost = store.completeAll(List.of(keptClaim, vanishedClaim, second), RETENTION);

    assertThat(lost).containsExactly(takenOver);
    assertThat(store.find(kept).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(store.find(vanished).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
    DedupRecord rivals = store.find(takenOver).orElseThrow();
    assertThat(rivals.status()).isEqualTo(DedupStatus.PROCESSING);
    assertThat(rivals.attempts()).isEqualTo(rival.token());
    assertThat(logs.containing("had vanished"))
        .singleElement()
        .asString()
        .contains(vanished.toString());
  }

  @Test
  void aRenewalThatFindsNoRecordSaysItVanishedAndTheHandlersSuccessIsRecordedAfterAll()
      throws SQLException {
    JdbcDedupStore store = JdbcDedupStore.builder(databases.postgres()).build();
    try (IdempotentExecutor executor =
        IdempotentExecutor.builder(store)
            .lease(Duration.ofSeconds(2))
            .renewalInterval(Duration.ofMillis(100))
            .build()) {
      DedupKey key = newKey();
      DedupClaim claim = executor.claim(key, null, "orders-0@9");
      delete(databases.postgres(), key);
      await()
          .atMost(Duration.ofSeconds(10))
          .until(() -> !logs.containing("vanished while the handler ran").isEmpty());

      claim.complete();

      assertThat(store.find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
      assertThat(logs.containing("taken over")).isEmpty();
      AtomicInteger runs = new AtomicInteger();
      assertThat(executor.execute(key, runs::incrementAndGet).outcome())
          .isEqualTo(Outcome.DUPLICATE);
      assertThat(runs).hasValue(0);
    }
  }

  /**
   * The renewal that finds the record gone asks the store what is there instead; if the handler
   * ends meanwhile and its SUCCESS is written again under its token (the vanished record's
   * rewrite), the answer is that row. It is the holder's own outcome, not another consumer's claim:
   * seen once after an asynchronous failover as a lease "taken over by another consumer".
   */
  @Test
  void aRenewalThatFindsTheRecordGoneWhileTheOutcomeIsWrittenAgainReportsNoTakeover()
      throws Exception {
    JdbcDedupStore jdbc = JdbcDedupStore.builder(databases.postgres()).build();
    CountDownLatch findAsked = new CountDownLatch(1);
    CountDownLatch outcomeWritten = new CountDownLatch(1);
    DedupStore store =
        InterceptedStore.before(
            jdbc,
            (method, args) -> {
              if (method.getName().equals("find")) {
                findAsked.countDown();
                outcomeWritten.await(10, TimeUnit.SECONDS);
              }
            });
    try (IdempotentExecutor executor =
        IdempotentExecutor.builder(store)
            .lease(Duration.ofSeconds(2))
            .renewalInterval(Duration.ofMillis(100))
            .build()) {
      DedupKey key = newKey();
      DedupClaim claim = executor.claim(key, null, "orders-0@11");
      delete(databases.postgres(), key);
      assertThat(findAsked.await(10, TimeUnit.SECONDS))
          .as("a renewal was refused and asked what holds the key")
          .isTrue();

      claim.complete();
      outcomeWritten.countDown();

      assertThat(store.find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
      assertThat(logs.containing("had vanished"))
          .singleElement()
          .asString()
          .contains(key.toString());
      // The renewal thread's verdict comes after the released find: give it time to log.
      Thread.sleep(300);
      assertThat(logs.containing("taken over")).isEmpty();
    }
  }

  /**
   * Zombie A's record is deleted and consumer B claims the key anew, under token 1 as A had. A's
   * late FAILED, fenced by the token alone, set B's running claim FAILED: a third delivery ran the
   * handler while B still ran, and B's SUCCESS was refused as a lost lease.
   */
  @Test
  void aVanishedHoldersLateFailureLeavesTheKeyClaimedAnewUnderItsTokenToTheNewHolder()
      throws SQLException {
    JdbcDedupStore store = JdbcDedupStore.builder(databases.postgres()).build();
    List<Integer> zombieLost = new CopyOnWriteArrayList<>();
    DedupListener zombieListener =
        new DedupListener() {
          @Override
          public void leaseLost(DedupKey key, int attempt) {
            zombieLost.add(attempt);
          }
        };
    try (IdempotentExecutor zombie =
            IdempotentExecutor.builder(store).ownerId("zombie").listener(zombieListener).build();
        IdempotentExecutor newHolder = IdempotentExecutor.builder(store).ownerId("b").build();
        IdempotentExecutor third =
            IdempotentExecutor.builder(store)
                .ownerId("c")
                .inProgressPolicy(InProgressPolicy.THROW)
                .build()) {
      DedupKey key = newKey();
      DedupClaim a = zombie.claim(key, null, "orders-0@5");
      delete(databases.postgres(), key);
      DedupClaim b = newHolder.claim(key, null, "orders-0@5");
      assertThat(b.attempt()).as("claimed anew under the zombie's token").isEqualTo(a.attempt());

      a.fail(new IllegalStateException("the zombie's handler failed late"));

      AtomicInteger thirdRuns = new AtomicInteger();
      Throwable thirdAnswer = catchThrowable(() -> third.execute(key, thirdRuns::incrementAndGet));
      assertThat(thirdRuns)
          .as("runs of the handler by a third delivery while the new holder's runs")
          .hasValue(0);
      assertThat(thirdAnswer).isInstanceOf(DedupInProgressException.class);
      assertThat(a.isLeaseLost()).as("the zombie is told its lease was lost").isTrue();
      assertThat(zombieLost).containsExactly(a.attempt());
      b.complete();
      assertThat(store.find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
      assertThat(third.execute(key, thirdRuns::incrementAndGet).outcome())
          .isEqualTo(Outcome.DUPLICATE);
      assertThat(thirdRuns).as("runs of the handler by a later delivery").hasValue(0);
    }
  }

  @Test
  void aKeyThisProcessHandledWhoseRecordVanishedIsClaimedAnewWithOneWarning() throws SQLException {
    try (IdempotentExecutor executor =
        IdempotentExecutor.builder(JdbcDedupStore.builder(databases.postgres()).build()).build()) {
      DedupKey key = newKey();
      AtomicInteger runs = new AtomicInteger();
      assertThat(executor.execute(key, runs::incrementAndGet).outcome())
          .isEqualTo(Outcome.PROCESSED);
      delete(databases.postgres(), key);

      assertThat(executor.execute(key, runs::incrementAndGet).outcome())
          .isEqualTo(Outcome.PROCESSED);
      assertThat(executor.execute(key, runs::incrementAndGet).outcome())
          .isEqualTo(Outcome.DUPLICATE);

      assertThat(runs).hasValue(2);
      assertThat(logs.containing("as a new key"))
          .singleElement()
          .asString()
          .contains(key.toString())
          .contains("held attempt 1");
    }
  }

  @Test
  void aClaimGivenBackAndClaimedAgainIsNotTakenForAVanishedRecord() {
    try (IdempotentExecutor executor =
        IdempotentExecutor.builder(JdbcDedupStore.builder(databases.postgres()).build()).build()) {
      DedupKey first = newKey();
      DedupKey second = newKey();
      var claims =
          executor.claimAll(
              List.of(
                  new IdempotentExecutor.Delivery(first, null, "orders-0@1"),
                  new IdempotentExecutor.Delivery(second, null, "orders-0@2")));
      claims.get(0).fail(new IllegalStateException("handler failed"));
      claims.releaseUnended();

      assertThat(executor.execute(second, null, "orders-0@2", () -> 1).outcome())
          .isEqualTo(Outcome.PROCESSED);
      assertThat(logs.containing("as a new key")).isEmpty();
    }
  }
}
