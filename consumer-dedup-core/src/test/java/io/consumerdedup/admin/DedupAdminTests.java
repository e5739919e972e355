package io.consumerdedup.admin;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.catchThrowable;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupAdmin;
import io.consumerdedup.core.DedupAdmin.LeaseFilter;
import io.consumerdedup.core.DedupAdmin.RecordQuery;
import io.consumerdedup.core.DedupInProgressException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupResult;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.jdbc.JdbcDedupAdmin;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.ConnectionSource;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.slf4j.LoggerFactory;

/**
 * {@link JdbcDedupAdmin} on a real database, one subclass per dialect: counts, lists with keyset
 * paging, release and forget, and what a consumer sees afterwards. A table of its own per class.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
abstract class DedupAdminTests {
  private static final Duration LEASE = Duration.ofMinutes(1);
  private static final Duration RETENTION = Duration.ofDays(1);

  private HikariDataSource dataSource;
  private JdbcDedupStore store;
  private DedupAdmin admin;

  /** A pool on a fresh database or schema holding the dedup table. */
  abstract HikariDataSource createDataSource();

  /** Drops what {@link #createDataSource()} created. */
  abstract void dropDatabase();

  /**
   * A table's name as the store is given it: plain by default, where the connection's schema holds
   * the tables; qualified with the schema where the connection has none of its own (a pooler).
   */
  String qualified(String table) {
    return table;
  }

  /** An UPDATE that ends the lease of the row of (biz_type, biz_key) a second ago. */
  abstract String expireLeaseSql();

  @BeforeAll
  void setUp() {
    dataSource = createDataSource();
    store = JdbcDedupStore.builder(dataSource).tableName(qualified("consumer_dedup")).build();
    admin = JdbcDedupAdmin.of(store);
  }

  @AfterAll
  void tearDown() {
    if (dataSource != null) {
      dataSource.close();
      dropDatabase();
    }
  }

  private ClaimResult.Claimed claim(DedupKey key, String owner) {
    return (ClaimResult.Claimed)
        store.claim(new ClaimRequest(key, owner, LEASE, RETENTION, null, "orders-0@" + owner));
  }

  @Test
  void countsPerBizTypeAndStatusWithExpiredLeases() throws SQLException {
    store.complete(claim(DedupKey.of("c-pay", "1"), "a"), RETENTION);
    store.complete(claim(DedupKey.of("c-pay", "2"), "a"), RETENTION);
    store.fail(claim(DedupKey.of("c-pay", "3"), "a"), "x", RETENTION);
    claim(DedupKey.of("c-pay", "4"), "a");
    claim(DedupKey.of("c-pay", "5"), "a");
    expireLease(DedupKey.of("c-pay", "5"));
    claim(DedupKey.of("c-points", "1"), "a");

    List<DedupAdmin.StatusCount> counts =
        admin.counts().stream().filter(c -> c.bizType().startsWith("c-")).toList();

    assertThat(counts)
        .containsExactly(
            new DedupAdmin.StatusCount("c-pay", DedupStatus.FAILED, 1, 0),
            new DedupAdmin.StatusCount("c-pay", DedupStatus.PROCESSING, 2, 1),
            new DedupAdmin.StatusCount("c-pay", DedupStatus.SUCCESS, 2, 0),
            new DedupAdmin.StatusCount("c-points", DedupStatus.PROCESSING, 1, 0));
  }

  @Test
  void listsFilterByStatusLeaseAndBizTypeAndPageOldestFirst() throws SQLException {
    List<DedupKey> keys = new ArrayList<>();
    for (int i = 0; i < 5; i++) {
      DedupKey key = DedupKey.of("l-order", "k-" + i);
      keys.add(key);
      store.fail(claim(key, "a"), "java.io.IOException: bank down " + i, RETENTION);
    }
    DedupKey stuck = DedupKey.of("l-order", "stuck");
    claim(stuck, "zombie");
    expireLease(stuck);
    DedupKey live = DedupKey.of("l-order", "live");
    claim(live, "busy");

    List<DedupKey> seen = new ArrayList<>();
    String after = null;
    int pages = 0;
    do {
      DedupAdmin.Page page =
          admin.list(new RecordQuery(DedupStatus.FAILED, "l-order", LeaseFilter.ANY, 2, after));
      page.records().forEach(r -> seen.add(r.key()));
      assertThat(page.records()).allSatisfy(r -> assertThat(r.lastError()).isPresent());
      after = page.next();
      pages++;
    } while (after != null);

    assertThat(seen).as("every FAILED key once, oldest first").containsExactlyElementsOf(keys);
    assertThat(pages).isEqualTo(3);
    assertThat(
            admin
                .list(
                    new RecordQuery(
                        DedupStatus.PROCESSING, "l-order", LeaseFilter.EXPIRED, 10, null))
                .records())
        .extracting(DedupRecord::key)
        .containsExactly(stuck);
    assertThat(admin.list(new RecordQuery(null, "l-order", LeaseFilter.LIVE, 10, null)).records())
        .extracting(DedupRecord::key, DedupRecord::owner)
        .containsExactly(org.assertj.core.groups.Tuple.tuple(live, "busy"));
    assertThatThrownBy(() -> admin.list(new RecordQuery(null, null, LeaseFilter.ANY, 10, "%%%")))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("Not a cursor");
  }

  @Test
  void releaseEndsAStuckLeaseTheNextDeliveryTakesOverAndTheOldHolderIsFencedOut()
      throws SQLException {
    DedupKey key = DedupKey.of("r-payment", "stuck-1");
    ClaimResult.Claimed hung = claim(key, "hung-consumer");
    expireLease(key);
    ListAppender<ILoggingEvent> logged = capture();

    DedupAdmin.Change change = admin.release(key, "alice");

    assertThat(change.applied()).isTrue();
    assertThat(change.before().status()).isEqualTo(DedupStatus.PROCESSING);
    assertThat(change.message()).contains("attempt 2");
    assertThat(logged.list)
        .extracting(ILoggingEvent::getFormattedMessage)
        .anySatisfy(
            line ->
                assertThat(line)
                    .contains("Released r-payment/stuck-1 at the request of alice")
                    .contains("hung-consumer"));
    DedupRecord released = store.find(key).orElseThrow();
    assertThat(released.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(released.lastError().orElseThrow()).contains("Released by alice");
    assertThat(store.renew(hung, LEASE)).as("the hung holder's renewal").isFalse();
    assertThat(store.complete(hung, RETENTION)).as("its late SUCCESS").isFalse();

    ClaimResult.Claimed next = claim(key, "next-delivery");
    assertThat(next.token()).isEqualTo(2);
    assertThat(store.complete(next, RETENTION)).isTrue();

    DedupAdmin.Change again = admin.release(key, "alice");
    assertThat(again.applied()).isFalse();
    assertThat(again.message()).contains("is SUCCESS, not PROCESSING");
    assertThat(admin.release(DedupKey.of("r-payment", "none"), "alice").applied()).isFalse();
  }

  /**
   * A holder that renewed its lease for longer than its claim's lease and retention (a handler hung
   * on a call without a timeout, under a short failed-retention) left the claim's expiry in the
   * past. The release kept that expiry: the next purge deleted the released record at once, the
   * release's note and the attempts with it, and the next delivery counted attempt 1 again.
   */
  @Test
  void aReleasedAttemptIsKeptAfterTheReleaseThoughItsHolderHeldItLongerThanItsRetention()
      throws SQLException {
    DedupKey key = DedupKey.of("r-payment", "held-long");
    claim(key, "hung-consumer");
    try (Connection connection = dataSource.getConnection();
        PreparedStatement backdate =
            connection.prepareStatement(
                "UPDATE "
                    + qualified("consumer_dedup")
                    + " SET created_at = created_at - INTERVAL '3' DAY,"
                    + " updated_at = updated_at - INTERVAL '3' DAY,"
                    + " expires_at = expires_at - INTERVAL '3' DAY"
                    + " WHERE biz_type = ? AND biz_key = ?")) {
      backdate.setString(1, key.bizType());
      backdate.setString(2, key.bizKey());
      assertThat(backdate.executeUpdate()).isEqualTo(1);
    }

    DedupAdmin.Change change = admin.release(key, "alice", true);
    assertThat(change.applied()).as(change.message()).isTrue();
    store.purge(1000);

    DedupRecord released = store.find(key).orElse(null);
    assertThat(released).as("the released record after a purge").isNotNull();
    assertThat(released.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(released.lastError().orElseThrow()).contains("Released by alice");
    assertThat(claim(key, "next-delivery").token()).as("the next delivery's attempt").isEqualTo(2);
  }

  @Test
  void aLiveHolderIsNotReleasedAndItsSuccessIsStillAcceptedSoTheHandlerRunsOnce() throws Exception {
    DedupKey key = DedupKey.of("r-payment", "live-1");
    AtomicInteger charges = new AtomicInteger();
    List<DedupAdmin.Change> changes = new ArrayList<>();
    try (IdempotentExecutor holder =
            IdempotentExecutor.builder(store).ownerId("live-holder").lease(LEASE).build();
        IdempotentExecutor redelivery = IdempotentExecutor.builder(store).lease(LEASE).build()) {
      DedupResult<Integer> applied =
          holder.execute(
              key,
              () -> {
                // The operator releases the key while its holder applies the effect.
                changes.add(admin.release(key, "alice"));
                return charges.incrementAndGet();
              });
      DedupResult<Integer> again = redelivery.execute(key, charges::incrementAndGet);

      DedupAdmin.Change change = changes.get(0);
      assertThat(change.applied()).as("release of a live lease").isFalse();
      assertThat(change.before().isLeaseLive()).isTrue();
      assertThat(change.message())
          .contains("live-holder")
          .contains("live lease")
          .contains("applied twice")
          .contains("force=true");
      assertThat(applied.outcome()).isEqualTo(Outcome.PROCESSED);
      assertThat(again.outcome()).isEqualTo(Outcome.DUPLICATE);
    }
    assertThat(charges).as("charges").hasValue(1);
    DedupRecord record = store.find(key).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(record.attempts()).isEqualTo(1);
  }

  @Test
  void forceReleasesALiveLeaseAndSaysWhatItRisks() {
    DedupKey key = DedupKey.of("r-payment", "forced-1");
    ClaimResult.Claimed dead = claim(key, "dead-pod");
    ListAppender<ILoggingEvent> logged = capture();

    DedupAdmin.Change change = admin.release(key, "alice", true);

    assertThat(change.applied()).isTrue();
    assertThat(change.before().isLeaseLive()).isTrue();
    assertThat(change.message()).contains("forced while its lease was live");
    assertThat(logged.list)
        .anySatisfy(
            event -> {
              assertThat(event.getLevel()).isEqualTo(Level.WARN);
              assertThat(event.getFormattedMessage())
                  .contains("Released r-payment/forced-1 at the request of alice")
                  .contains("handler runs a second time");
            });
    DedupRecord released = store.find(key).orElseThrow();
    assertThat(released.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(released.lastError().orElseThrow()).contains("Released by alice (forced");
    assertThat(store.complete(dead, RETENTION)).as("the old holder's SUCCESS").isFalse();
    assertThat(claim(key, "next-delivery").token()).isEqualTo(2);
  }

  @Test
  void forgetLetsAReplayApplyTheKeyAgain() throws SQLException {
    DedupKey key = DedupKey.of("f-payment", "done-1");
    store.complete(claim(key, "a"), RETENTION);
    ListAppender<ILoggingEvent> logged = capture();

    DedupAdmin.Change change = admin.forget(key, "bob");

    assertThat(change.applied()).isTrue();
    assertThat(change.before().status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(admin.find(key)).isEmpty();
    assertThat(claim(key, "replay").token()).as("the replay runs the handler again").isEqualTo(1);
    assertThat(logged.list)
        .extracting(ILoggingEvent::getFormattedMessage)
        .anySatisfy(
            line -> assertThat(line).contains("Forgot f-payment/done-1 at the request of bob"));
    DedupKey failed = DedupKey.of("f-payment", "failed-1");
    store.fail(claim(failed, "a"), "java.io.IOException: bank down", RETENTION);
    assertThat(admin.forget(failed, "bob").applied()).as("a FAILED key").isTrue();
    DedupKey expired = DedupKey.of("f-payment", "expired-1");
    claim(expired, "gone-pod");
    expireLease(expired);
    assertThat(admin.forget(expired, "bob").applied()).as("a lease run out, unforced").isTrue();
    assertThat(admin.find(expired)).isEmpty();
    assertThat(admin.forget(DedupKey.of("f-payment", "none"), "bob").applied()).isFalse();
    assertThatThrownBy(() -> admin.forget(key, " "))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("requestedBy");
  }

  @Test
  void aRequesterWithControlCharactersOrTooLongIsRefusedNamingItAndNothingChanges()
      throws SQLException {
    DedupKey key = DedupKey.of("r-payment", "expired-hostile");
    claim(key, "gone-pod");
    expireLease(key);
    // A newline would write a line of its own in the log and the record's note, a forged audit
    // line; a NUL is refused by PostgreSQL and stored by MySQL; a long name overflows the note.
    for (String requester : List.of("ops\nINFO Released by admin", "ops\u0000", "o".repeat(3000))) {
      String name = requester.length() > 40 ? "a long name" : requester;
      assertThat(catchThrowable(() -> admin.release(key, requester, true)))
          .as("release by %s", name)
          .isInstanceOf(IllegalArgumentException.class)
          .hasMessageContaining("requestedBy");
      assertThat(catchThrowable(() -> admin.forget(key, requester, true)))
          .as("forget by %s", name)
          .isInstanceOf(IllegalArgumentException.class)
          .hasMessageContaining("requestedBy");
    }
    assertThat(admin.find(key).orElseThrow().status()).isEqualTo(DedupStatus.PROCESSING);
    assertThat(admin.release(key, "alice (ops)", false).applied()).isTrue();
  }

  @Test
  void anUnpairedSurrogateInTheRequesterOrTheTypeFilterIsRefusedNamingItAndNothingChanges()
      throws SQLException {
    DedupKey key = DedupKey.of("u-payment", "expired-surrogate");
    claim(key, "gone-pod");
    expireLease(key);
    // Both drivers send an unpaired surrogate as '?': the note and the list would name another
    // text than the one asked for.
    assertThat(catchThrowable(() -> admin.release(key, "ops\uD800", false)))
        .as("release by ops followed by an unpaired surrogate")
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("requestedBy")
        .hasMessageContaining("unpaired surrogate");
    assertThat(catchThrowable(() -> admin.forget(key, "\uDC00ops", false)))
        .as("forget by an unpaired surrogate followed by ops")
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("requestedBy");
    DedupRecord left = admin.find(key).orElseThrow();
    assertThat(left.status())
        .as("the key after both were refused")
        .isEqualTo(DedupStatus.PROCESSING);

    // Another application's type, which the driver's '?' for the surrogate would match.
    store.complete(claim(DedupKey.of("u-pay?", "theirs"), "a"), RETENTION);
    for (String type : List.of("u-pay\uD800", "u-pay\u0000", "u-pay\n", " ", "u".repeat(65))) {
      assertThat(
              catchThrowable(
                  () -> admin.list(new RecordQuery(null, type, LeaseFilter.ANY, 10, null))))
          .as("a list of the type %s", type.length() > 10 ? "of 65 characters" : type)
          .isInstanceOf(IllegalArgumentException.class)
          .hasMessageContaining("bizType");
    }
  }

  @Test
  void aCursorBeyondTheTimesTheDatabaseStoresIsRefusedNamingItNotListedFromTheStart()
      throws SQLException {
    store.complete(claim(DedupKey.of("k-order", "1"), "a"), RETENTION);
    // As a cursor of this list encodes it: creation time (seconds.nanos), type and key.
    String farAhead =
        java.util.Base64.getUrlEncoder()
            .withoutPadding()
            .encodeToString(
                "9000000000000000.0\nk-order\n1".getBytes(java.nio.charset.StandardCharsets.UTF_8));

    assertThat(
            catchThrowable(
                () -> admin.list(new RecordQuery(null, "k-order", LeaseFilter.ANY, 10, farAhead))))
        .as("a list after a cursor millions of years ahead of every record")
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("Not a cursor");
  }

  @Test
  void aLiveHolderIsNotForgottenSoADeliveryWhileItRunsIsToldInProgressAndTheHandlerRunsOnce()
      throws Exception {
    DedupKey key = DedupKey.of("f-payment", "live-1");
    AtomicInteger charges = new AtomicInteger();
    List<DedupAdmin.Change> changes = new ArrayList<>();
    List<Object> deliveriesWhileHeld = new ArrayList<>();
    ListAppender<ILoggingEvent> logged = capture();
    try (IdempotentExecutor holder =
            IdempotentExecutor.builder(store).ownerId("live-holder").lease(LEASE).build();
        IdempotentExecutor redelivery = IdempotentExecutor.builder(store).lease(LEASE).build()) {
      DedupResult<Integer> applied =
          holder.execute(
              key,
              () -> {
                // The operator forgets the key while its holder applies the effect, and the key
                // is delivered again meanwhile.
                changes.add(admin.forget(key, "bob"));
                try {
                  deliveriesWhileHeld.add(
                      redelivery.execute(key, charges::incrementAndGet).outcome());
                } catch (DedupInProgressException e) {
                  deliveriesWhileHeld.add(e);
                }
                return charges.incrementAndGet();
              });

      assertThat(applied.outcome()).isEqualTo(Outcome.PROCESSED);
    }
    assertThat(charges).as("charges").hasValue(1);
    assertThat(deliveriesWhileHeld)
        .as("the delivery while the holder runs")
        .singleElement()
        .isInstanceOf(DedupInProgressException.class);
    DedupAdmin.Change change = changes.get(0);
    assertThat(change.applied()).as("forget of a live lease").isFalse();
    assertThat(change.before().isLeaseLive()).isTrue();
    assertThat(change.message())
        .startsWith("Not forgotten: f-payment/live-1 is held by live-holder")
        .contains("live lease")
        .contains("applied twice")
        .contains("Wait for the lease to run out")
        .contains("forget with force=true");
    assertThat(logged.list)
        .extracting(ILoggingEvent::getFormattedMessage)
        .anySatisfy(
            line ->
                assertThat(line)
                    .contains("Did not forget f-payment/live-1 at the request of bob")
                    .contains("its lease is live"));
    DedupRecord record = store.find(key).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(record.owner()).isEqualTo("live-holder");
  }

  @Test
  void forceForgetsALiveLeaseAndSaysWhatItRisks() {
    DedupKey key = DedupKey.of("f-payment", "forced-1");
    ClaimResult.Claimed oldHolder = claim(key, "dead-pod");
    ListAppender<ILoggingEvent> logged = capture();

    DedupAdmin.Change change = admin.forget(key, "bob", true);

    assertThat(change.applied()).isTrue();
    assertThat(change.before().isLeaseLive()).isTrue();
    assertThat(change.message()).contains("forced while its lease was live");
    assertThat(logged.list)
        .anySatisfy(
            event -> {
              assertThat(event.getLevel()).isEqualTo(Level.WARN);
              assertThat(event.getFormattedMessage())
                  .contains("Forgot f-payment/forced-1 at the request of bob")
                  .contains("handler runs a second time");
            });
    assertThat(admin.find(key)).isEmpty();
    assertThat(claim(key, "next-delivery").token())
        .as("the next delivery claims the key anew")
        .isEqualTo(oldHolder.token());
    // The old holder, if it still runs, has the new claim's token: its late outcome is refused.
    assertThat(store.fail(oldHolder, "late", RETENTION)).as("the old holder's FAILED").isFalse();
    assertThat(store.complete(oldHolder, RETENTION)).as("the old holder's SUCCESS").isFalse();
    DedupRecord record = store.find(key).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.PROCESSING);
    assertThat(record.owner()).isEqualTo("next-delivery");
  }

  @Test
  void aStatusANewerVersionWroteIsListedAsStoredBesideTheOtherRecordsAndNotForgottenUnforced()
      throws SQLException {
    DedupKey older = DedupKey.of("n-order", "1");
    store.complete(claim(older, "a"), RETENTION);
    DedupKey newer = DedupKey.of("n-order", "2");
    store.complete(claim(newer, "a"), RETENTION);
    DedupKey later = DedupKey.of("n-order", "3");
    store.fail(claim(later, "a"), "java.io.IOException: bank down", RETENTION);
    writeStatusOfANewerVersion(newer, "ABANDONED");

    Throwable listed =
        catchThrowable(
            () -> admin.list(new RecordQuery(null, "n-order", LeaseFilter.ANY, 10, null)));

    assertThat(listed).as("the list of n-order, one of its records ABANDONED").isNull();
    assertThat(admin.list(new RecordQuery(null, "n-order", LeaseFilter.ANY, 10, null)).records())
        .extracting(DedupRecord::key, DedupRecord::status, DedupRecord::storedStatus)
        .containsExactly(
            org.assertj.core.groups.Tuple.tuple(older, DedupStatus.SUCCESS, "SUCCESS"),
            org.assertj.core.groups.Tuple.tuple(newer, DedupStatus.UNKNOWN, "ABANDONED"),
            org.assertj.core.groups.Tuple.tuple(later, DedupStatus.FAILED, "FAILED"));
    assertThat(
            admin
                .list(new RecordQuery(DedupStatus.UNKNOWN, "n-order", LeaseFilter.ANY, 10, null))
                .records())
        .as("the records of a status this version does not know")
        .extracting(DedupRecord::key)
        .containsExactly(newer);
    assertThat(admin.counts())
        .as("the counts")
        .contains(new DedupAdmin.StatusCount("n-order", DedupStatus.UNKNOWN, 1, 0, "ABANDONED"));
    assertThat(admin.find(newer).orElseThrow().storedStatus()).isEqualTo("ABANDONED");

    DedupAdmin.Change release = admin.release(newer, "alice", true);
    assertThat(release.applied()).as("a forced release").isFalse();
    assertThat(release.message())
        .startsWith("Not released: n-order/2 has the status 'ABANDONED'")
        .contains("does not know");
    DedupAdmin.Change forget = admin.forget(newer, "alice");
    assertThat(forget.applied()).as("a forget").isFalse();
    assertThat(forget.message()).contains("'ABANDONED'").contains("force=true");
    assertThat(admin.find(newer)).as("the record after both were refused").isPresent();
    assertThat(admin.forget(newer, "alice", true).message())
        .contains("forced over the status 'ABANDONED'");
    assertThat(admin.find(newer)).as("the record after a forced forget").isEmpty();
  }

  @Test
  void anExecutorOverAMissingTableOrOneLackingAColumnFailsWhenBuiltNamingTheFix()
      throws SQLException {
    JdbcDedupStore missing =
        JdbcDedupStore.builder(dataSource).tableName(qualified("no_such_dedup")).build();
    assertThatThrownBy(() -> IdempotentExecutor.builder(missing).build())
        .isInstanceOf(IllegalStateException.class)
        .hasMessageContaining("The dedup table " + qualified("no_such_dedup") + " does not exist")
        .hasMessageContaining(schemaFile());

    try (Connection connection = dataSource.getConnection();
        Statement statement = connection.createStatement()) {
      statement.execute(
          "CREATE TABLE "
              + qualified("partial_dedup")
              + " AS SELECT biz_type, biz_key, status, attempts, owner,"
              + " lease_until, fingerprint, last_error, source, created_at, updated_at, expires_at"
              + " FROM "
              + qualified("consumer_dedup")
              + " WHERE 1 = 0");
    }
    JdbcDedupStore partial =
        JdbcDedupStore.builder(dataSource).tableName(qualified("partial_dedup")).build();
    assertThatThrownBy(() -> IdempotentExecutor.builder(partial).build())
        .isInstanceOf(IllegalStateException.class)
        .hasMessageContaining(
            "The dedup table " + qualified("partial_dedup") + " lacks the column(s) claim_id")
        .hasMessageContaining(schemaFile());

    IdempotentExecutor.builder(store).build().close();
  }

  @Test
  void anExecutorBuildsWhileTheDatabaseIsDownAndTheFirstRecordWaitsForIt() {
    JdbcDedupStore unreachable = JdbcDedupStore.builder(ConnectionSource.refusing()).build();

    IdempotentExecutor.builder(unreachable).build().close();
  }

  /** The schema file of this dialect, which the start-up check names. */
  abstract String schemaFile();

  private static ListAppender<ILoggingEvent> capture() {
    Logger logger = (Logger) LoggerFactory.getLogger(JdbcDedupAdmin.class);
    ListAppender<ILoggingEvent> appender = new ListAppender<>();
    appender.start();
    logger.addAppender(appender);
    return appender;
  }

  /**
   * Sets the status of {@code key} to one this version does not know, as a newer version sharing
   * the table would, after its migration widened the status check.
   */
  private void writeStatusOfANewerVersion(DedupKey key, String status) throws SQLException {
    String table = qualified("consumer_dedup");
    try (Connection connection = dataSource.getConnection();
        Statement statement = connection.createStatement();
        PreparedStatement update =
            connection.prepareStatement(
                "UPDATE " + table + " SET status = ? WHERE biz_type = ? AND biz_key = ?")) {
      statement.execute("ALTER TABLE " + table + " DROP CONSTRAINT consumer_dedup_status_ck");
      update.setString(1, status);
      update.setString(2, key.bizType());
      update.setString(3, key.bizKey());
      assertThat(update.executeUpdate()).isEqualTo(1);
    }
  }

  private void expireLease(DedupKey key) throws SQLException {
    try (Connection connection = dataSource.getConnection();
        PreparedStatement statement = connection.prepareStatement(expireLeaseSql())) {
      statement.setString(1, key.bizType());
      statement.setString(2, key.bizKey());
      assertThat(statement.executeUpdate()).isEqualTo(1);
    }
  }
}
