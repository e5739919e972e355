package io.consumerdedup.core.internal;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupLeaseLostException;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.DedupStoreUnavailableException;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.FaultyDataSource;
import io.consumerdedup.testing.StoreFixture;
import java.sql.Connection;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Two attempts of one key in one process, both with their outcome kept: the first attempt's lease
 * ran out while its handler ran (the process stalled), another thread of the process claimed the
 * key again, and then neither outcome could be written (the database unreachable). On a real
 * PostgreSQL through a proxy that refuses connections.
 */
class SupersededOutcomeTest {
  @RegisterExtension static final StoreFixture db = new StoreFixture("superseded", 4);

  private static final Duration LEASE = Duration.ofSeconds(1);
  private static final Duration INTERVAL = Duration.ofMillis(200);
  private static final Duration RETENTION = Duration.ofDays(1);
  private static final Duration WAIT = Duration.ofSeconds(5);

  private FaultyDataSource faulty;
  private LeaseRenewer renewer;
  private Outcomes outcomes;

  @BeforeEach
  void start() {
    faulty = FaultyDataSource.on(db.schema(), 4, Duration.ofMillis(500));
    DedupStore store =
        JdbcDedupStore.builder(faulty)
            .retryInitialBackoff(Duration.ofMillis(50))
            .retryMaxBackoff(Duration.ofMillis(200))
            .retryMaxDuration(Duration.ofMillis(500))
            .build();
    renewer = new LeaseRenewer(store, LEASE, INTERVAL, DedupListener.NOOP);
    outcomes = new Outcomes(store, DedupListener.NOOP, renewer, RETENTION, RETENTION, INTERVAL);
  }

  @AfterEach
  void stop() {
    outcomes.close();
    renewer.close();
    faulty.close();
  }

  /**
   * The first attempt's outcome was kept first. Its retries were cancelled when the second one was
   * kept, but its renewal was not stopped: refused ever after (the key is the second attempt's),
   * and ignored as an outcome being written, it asked the store every interval for as long as the
   * executor ran.
   */
  @Test
  void theStaleAttemptKeptFirstStopsRenewingOnceBothAreSettled() throws Exception {
    DedupKey key = DedupKey.of("superseded", "stale-first");
    Attempts attempts = twoAttemptsKeptInOrder(key, true);

    assertRecorded(key, attempts);
    await()
        .atMost(WAIT)
        .alias("the stale attempt's renewal stopped: only the timer's own task left")
        .until(() -> renewer.timerTasks() == 1);
  }

  /**
   * The second attempt's outcome was kept first, and taken out by the stale one kept after it: its
   * retries cancelled, the stale one's write refused, the key stayed PROCESSING under the second
   * attempt's lease, renewed for as long as the executor ran: every redelivery "in progress", and
   * after a restart the handler ran again.
   */
  @Test
  void theCurrentAttemptKeptFirstIsStillWritten() throws Exception {
    DedupKey key = DedupKey.of("superseded", "current-first");
    Attempts attempts = twoAttemptsKeptInOrder(key, false);

    assertRecorded(key, attempts);
    await()
        .atMost(WAIT)
        .alias("both renewals stopped: only the timer's own task left")
        .until(() -> renewer.timerTasks() == 1);
  }

  /**
   * Both attempts' SUCCESS marks reach the outcome writer together, in one group. The store answers
   * for keys, not attempts: the key was answered (the current attempt's mark written), so the stale
   * attempt, refused, was settled as written too. The listener heard two SUCCESSes of the key, the
   * stale record's future said durable, and the takeover (two handlers ran for the key) went
   * unsaid.
   */
  @Test
  void theStaleAttemptGroupedWithTheCurrentOneIsRefused() throws Exception {
    DedupKey key = DedupKey.of("superseded", "one-group");
    ClaimResult.Claimed stale = claim(key);
    Thread.sleep(LEASE.plusMillis(200).toMillis()); // its lease runs out while its handler runs
    ClaimResult.Claimed current = claim(key);
    DedupKey other = DedupKey.of("superseded", "ahead");
    ClaimResult.Claimed ahead = claim(other);

    List<String> heard = new CopyOnWriteArrayList<>();
    DedupListener listener =
        new DedupListener() {
          @Override
          public void completed(DedupKey completed, int attempt, Duration handlerTime) {
            heard.add("SUCCESS " + completed.bizKey() + " " + attempt);
          }

          @Override
          public void leaseLost(DedupKey lost, int attempt) {
            heard.add("lost " + lost.bizKey() + " " + attempt);
          }
        };
    Outcomes grouped = new Outcomes(db.store(), listener, renewer, RETENTION, RETENTION, INTERVAL);
    CountDownLatch taken = new CountDownLatch(1);
    CountDownLatch go = new CountDownLatch(1);
    AtomicBoolean first = new AtomicBoolean(true);
    FaultPoints.install(
        point -> {
          if (point == FaultPoints.Point.SUCCESS_MARKS_TAKEN && first.getAndSet(false)) {
            taken.countDown();
            Latches.awaitThroughInterrupts(go, System.nanoTime() + WAIT.toNanos());
          }
        });
    try {
      long now = System.nanoTime();
      // The writer busy with another key's mark: the two attempts' marks gather behind it.
      CompletableFuture<Void> aheadWritten =
          grouped.completeLater(
              other, ahead.token(), null, renewer.start(ahead, now), Duration.ZERO);
      assertThat(taken.await(WAIT.toMillis(), TimeUnit.MILLISECONDS)).isTrue();
      CompletableFuture<Void> staleWritten =
          grouped.completeLater(key, stale.token(), null, renewer.start(stale, now), Duration.ZERO);
      CompletableFuture<Void> currentWritten =
          grouped.completeLater(
              key, current.token(), null, renewer.start(current, now), Duration.ZERO);
      go.countDown();

      assertThat(aheadWritten).succeedsWithin(WAIT);
      assertThat(currentWritten).as("the current attempt's SUCCESS").succeedsWithin(WAIT);
      assertThat(staleWritten)
          .as("the stale attempt's SUCCESS, refused")
          .failsWithin(WAIT)
          .withThrowableOfType(ExecutionException.class)
          .withCauseInstanceOf(DedupLeaseLostException.class);
      assertThat(heard)
          .containsExactlyInAnyOrder(
              "SUCCESS ahead " + ahead.token(),
              "SUCCESS one-group " + current.token(),
              "lost one-group " + stale.token());
      assertThat(db.store().find(key).orElseThrow().attempts()).isEqualTo(current.token());
    } finally {
      FaultPoints.install(null);
      go.countDown();
      grouped.close();
    }
  }

  /**
   * The current attempt's SUCCESS kept (the database refused it), then the stale attempt's SUCCESS
   * queued for the writer. Noted as on its way, the stale one took the current one's place among
   * the outcomes not recorded, and once its write was refused nothing listed the key: the current
   * SUCCESS, still being retried, was no longer reported as pending (this process would claim the
   * key again, and a Spring consumer's commit passed its record as if its SUCCESS were written).
   */
  @Test
  void theCurrentAttemptKeptStaysPendingWhenTheStaleOneIsQueuedAndRefused() throws Exception {
    DedupKey key = DedupKey.of("superseded", "kept-then-queued");
    ClaimResult.Claimed stale = claim(key);
    Thread.sleep(LEASE.plusMillis(200).toMillis()); // its lease runs out while its handler runs
    ClaimResult.Claimed current = claim(key);
    // Refuses the current attempt's SUCCESS only; the stale one's is fenced out before any row
    // changes.
    execute(
        "CREATE FUNCTION refuse_current() RETURNS trigger AS $$ BEGIN"
            + " IF NEW.status = 'SUCCESS' AND NEW.attempts = "
            + current.token()
            + " THEN RAISE EXCEPTION 'injected: SUCCESS refused' USING ERRCODE = '40001';"
            + " END IF; RETURN NEW; END $$ LANGUAGE plpgsql");
    execute(
        "CREATE TRIGGER refuse_current BEFORE UPDATE ON consumer_dedup FOR EACH ROW"
            + " EXECUTE FUNCTION refuse_current()");
    try {
      long now = System.nanoTime();
      completeKept(key, current, renewer.start(current, now));
      CompletableFuture<Void> staleWritten =
          outcomes.completeLater(
              key, stale.token(), null, renewer.start(stale, now), Duration.ZERO);
      assertThat(staleWritten)
          .as("the stale attempt's SUCCESS, refused")
          .failsWithin(WAIT)
          .withThrowableOfType(ExecutionException.class)
          .withCauseInstanceOf(DedupLeaseLostException.class);

      assertThat(outcomes.isPending(key))
          .as("the current attempt's SUCCESS, still not written, is pending")
          .isTrue();
      assertThat(outcomes.unrecorded()).containsEntry(key, "SUCCESS");
    } finally {
      execute("DROP TRIGGER refuse_current ON consumer_dedup");
      execute("DROP FUNCTION refuse_current()");
    }
    assertRecorded(key, new Attempts(stale, current));
  }

  private static void execute(String sql) throws Exception {
    try (Connection connection = db.dataSource().getConnection();
        Statement statement = connection.createStatement()) {
      statement.execute(sql);
    }
  }

  private record Attempts(ClaimResult.Claimed stale, ClaimResult.Claimed current) {}

  private Attempts twoAttemptsKeptInOrder(DedupKey key, boolean staleFirst) throws Exception {
    ClaimResult.Claimed stale = claim(key);
    Thread.sleep(LEASE.plusMillis(200).toMillis()); // its lease runs out while its handler runs
    ClaimResult.Claimed current = claim(key);
    assertThat(current.token()).as("the key claimed again").isGreaterThan(stale.token());

    faulty.proxy().refuse();
    long now = System.nanoTime();
    LeaseRenewer.Renewal staleRenewal = renewer.start(stale, now);
    LeaseRenewer.Renewal currentRenewal = renewer.start(current, now);
    if (staleFirst) {
      completeKept(key, stale, staleRenewal);
      completeKept(key, current, currentRenewal);
    } else {
      completeKept(key, current, currentRenewal);
      completeKept(key, stale, staleRenewal);
    }
    faulty.proxy().pass();
    return new Attempts(stale, current);
  }

  private void completeKept(DedupKey key, ClaimResult.Claimed claim, LeaseRenewer.Renewal renewal) {
    assertThatThrownBy(() -> outcomes.complete(key, claim.token(), null, renewal, Duration.ZERO))
        .as("SUCCESS of attempt %s kept: the database refuses connections", claim.token())
        .isInstanceOf(DedupStoreUnavailableException.class);
  }

  private void assertRecorded(DedupKey key, Attempts attempts) {
    await()
        .atMost(WAIT)
        .alias("the current attempt's SUCCESS written by the background retry")
        .until(
            () ->
                db.store().find(key).map(DedupRecord::status).orElse(null) == DedupStatus.SUCCESS);
    await()
        .atMost(WAIT)
        .alias("no outcome of the key left to write")
        .until(() -> !outcomes.isPending(key));
    assertThat(db.store().find(key).orElseThrow().attempts())
        .as("SUCCESS of the current attempt")
        .isEqualTo(attempts.current().token());
  }

  private static ClaimResult.Claimed claim(DedupKey key) {
    ClaimResult result =
        db.store().claim(new ClaimRequest(key, "test-owner", LEASE, RETENTION, null, null));
    assertThat(result).isInstanceOf(ClaimResult.Claimed.class);
    return (ClaimResult.Claimed) result;
  }
}
