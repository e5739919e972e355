package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.catchThrowable;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.internal.FaultPoints;
import io.consumerdedup.jdbc.JdbcDedupStore;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * A record's SUCCESS written with the next record's claim ({@link
 * DedupClaim#completeWithNextClaim()}), as a caller that claims record by record uses it: when the
 * next claim returns, the mark is written; a lost lease, a vanished record, a lost reply and an
 * outage are handled as for any SUCCESS mark.
 */
class CompleteWithNextClaimTest {
  @RegisterExtension static final FaultyStoreFixture db = new FaultyStoreFixture("next_claim");

  private IdempotentExecutor executor(JdbcDedupStore store, Duration lease) {
    return db.executor(IdempotentExecutor.builder(store).lease(lease).listener(db.recording()));
  }

  private static DedupStatus status(String bizKey) {
    return db.store().find(DedupKey.of("payment", bizKey)).orElseThrow().status();
  }

  @Test
  void theNextClaimWritesThePreviousRecordsSuccessBeforeItReturns() throws Exception {
    IdempotentExecutor executor = executor(db.store(), Duration.ofMinutes(1));
    // A mark left waiting 5 ms goes to the writer instead, and a thread starved of CPU between the
    // two claims can outlast that: so the ride is tried a few times, each with its own keys.
    int tries = 0;
    boolean rode = false;
    while (!rode && tries < 10) {
      tries++;
      DedupClaim first = executor.claim(DedupKey.of("payment", "first-" + tries), null, null);
      CompletableFuture<Void> written = first.completeWithNextClaim();
      DedupClaim second = executor.claim(DedupKey.of("payment", "second-" + tries), null, null);
      rode = written.isDone();

      written.get(10, TimeUnit.SECONDS);
      assertThat(status("first-" + tries)).isEqualTo(DedupStatus.SUCCESS);
      assertThat(second.isDuplicate()).isFalse();
      assertThat(status("second-" + tries)).isEqualTo(DedupStatus.PROCESSING);
    }
    assertThat(rode).as("written with the second claim, not later by the writer").isTrue();
    assertThat(db.events()).contains("completed first-" + tries + " attempt 1");
  }

  @Test
  void withoutANextClaimTheWriterWritesItAndFlushMarksDoesSoAtOnce() throws Exception {
    IdempotentExecutor executor = executor(db.store(), Duration.ofMinutes(1));
    CompletableFuture<Void> alone =
        executor.claim(DedupKey.of("payment", "alone"), null, null).completeWithNextClaim();
    alone.get(5, TimeUnit.SECONDS);
    assertThat(status("alone")).isEqualTo(DedupStatus.SUCCESS);

    CompletableFuture<Void> flushed =
        executor.claim(DedupKey.of("payment", "flushed"), null, null).completeWithNextClaim();
    executor.flushMarks();
    flushed.get(5, TimeUnit.SECONDS);
    assertThat(status("flushed")).isEqualTo(DedupStatus.SUCCESS);
  }

  @Test
  void aMarkParkedWhileAnotherThreadsMarkWaitsIsWrittenWithoutANextClaim() throws Exception {
    IdempotentExecutor executor = executor(db.store(), Duration.ofMinutes(1));
    DedupClaim first = executor.claim(DedupKey.of("payment", "parked-first"), null, null);
    CountDownLatch firstParked = new CountDownLatch(1);
    CompletableFuture<CompletableFuture<Void>> second = new CompletableFuture<>();
    // Claimed first, parked a moment after the first mark, while the first one's wait runs; no
    // thread claims again and nobody flushes, so only the wait's end can bring either to the
    // writer.
    Thread other =
        new Thread(
            () -> {
              try {
                DedupClaim claim =
                    executor.claim(DedupKey.of("payment", "parked-second"), null, null);
                firstParked.await();
                second.complete(claim.completeWithNextClaim());
              } catch (Exception | Error e) {
                second.completeExceptionally(e);
              }
            });
    other.start();
    await().atMost(Duration.ofSeconds(10)).until(() -> other.getState() == Thread.State.WAITING);
    CompletableFuture<Void> firstMark = first.completeWithNextClaim();
    firstParked.countDown();

    firstMark.get(10, TimeUnit.SECONDS);
    second.get(10, TimeUnit.SECONDS).get(10, TimeUnit.SECONDS);
    assertThat(status("parked-first")).isEqualTo(DedupStatus.SUCCESS);
    assertThat(status("parked-second")).isEqualTo(DedupStatus.SUCCESS);
  }

  @Test
  void aNextClaimOfTheSameKeyFindsItsSuccessAndIsADuplicate() {
    IdempotentExecutor executor = executor(db.store(), Duration.ofMinutes(1));
    DedupKey key = DedupKey.of("payment", "same-key");
    CompletableFuture<Void> written = executor.claim(key, null, null).completeWithNextClaim();

    DedupClaim again = executor.claim(key, null, null);

    assertThat(again.isDuplicate()).isTrue();
    assertThat(written).isCompleted();
  }

  @Test
  void aMarkWhoseLeaseWasTakenOverIsReportedLostAndTheNextClaimStillHoldsItsKey() throws Exception {
    IdempotentExecutor executor = executor(db.store(), Duration.ofMinutes(1));
    IdempotentExecutor rival = executor(db.store(), Duration.ofMinutes(1));
    DedupKey slow = DedupKey.of("payment", "taken-over");
    DedupClaim claim = executor.claim(slow, null, null);
    execute(
        "UPDATE consumer_dedup SET lease_until = now() - interval '1 second'"
            + " WHERE biz_key = 'taken-over'"); // its lease ran out, as after a long pause
    assertThat(rival.claim(slow, null, null).attempt()).as("taken over").isEqualTo(2);

    CompletableFuture<Void> written = claim.completeWithNextClaim();
    DedupClaim other = executor.claim(DedupKey.of("payment", "after-takeover"), null, null);

    assertThat(other.isDuplicate()).isFalse();
    assertThatThrownBy(() -> written.get(5, TimeUnit.SECONDS))
        .isInstanceOf(ExecutionException.class)
        .hasCauseInstanceOf(DedupLeaseLostException.class);
    assertThat(db.events()).contains("leaseLost taken-over attempt 1");
    DedupRecord record = db.store().find(slow).orElseThrow();
    assertThat(record.status())
        .as("the new holder's claim, untouched")
        .isEqualTo(DedupStatus.PROCESSING);
    assertThat(record.attempts()).isEqualTo(2);
  }

  private static void execute(String sql) throws Exception {
    try (Connection connection = db.dataSource().getConnection();
        PreparedStatement statement = connection.prepareStatement(sql)) {
      statement.executeUpdate();
    }
  }

  @Test
  void aMarkWhoseRecordVanishedIsWrittenAgain() throws Exception {
    IdempotentExecutor executor = executor(db.store(), Duration.ofMinutes(1));
    DedupClaim claim = executor.claim(DedupKey.of("payment", "vanished"), null, null);
    execute("DELETE FROM consumer_dedup WHERE biz_key = 'vanished'");

    CompletableFuture<Void> written = claim.completeWithNextClaim();
    executor.claim(DedupKey.of("payment", "after-vanished"), null, null);

    written.get(5, TimeUnit.SECONDS);
    assertThat(status("vanished")).isEqualTo(DedupStatus.SUCCESS);
    assertThat(db.events()).doesNotContain("leaseLost vanished attempt 1");
  }

  @Test
  void aClaimWhoseReplyWasLostCarriesTheMarkOnceAndIsRecognisedAsOurs() throws Exception {
    IdempotentExecutor executor = executor(db.faultyStore().build(), Duration.ofMinutes(1));
    DedupClaim first = executor.claim(DedupKey.of("payment", "lost-reply-mark"), null, null);
    CompletableFuture<Void> written = first.completeWithNextClaim();
    db.faulty().loseReplyOnce("WITH m AS (UPDATE");

    DedupClaim second = executor.claim(DedupKey.of("payment", "lost-reply-claim"), null, null);

    assertThat(db.faulty().repliesLost()).as("replies lost after the commit").isEqualTo(1);
    assertThat(second.isDuplicate()).isFalse();
    assertThat(second.attempt()).as("the committed claim, not a second one").isEqualTo(1);
    written.get(5, TimeUnit.SECONDS);
    assertThat(status("lost-reply-mark")).isEqualTo(DedupStatus.SUCCESS);
    assertThat(db.events()).containsExactly("completed lost-reply-mark attempt 1");
  }

  @Test
  void aMarkWhoseClaimMeetsAnOutageIsKeptAndWrittenOnceTheDatabaseAnswers() throws Exception {
    IdempotentExecutor executor = executor(db.faultyStore().build(), Duration.ofSeconds(30));
    DedupKey key = DedupKey.of("payment", "outage-mark");
    DedupClaim first = executor.claim(key, null, null);
    CompletableFuture<Void> written = first.completeWithNextClaim();
    db.faulty().proxy().refuse();
    try {
      assertThatThrownBy(() -> executor.claim(DedupKey.of("payment", "outage-next"), null, null))
          .isInstanceOf(DedupStoreUnavailableException.class);
      assertThatThrownBy(() -> written.get(5, TimeUnit.SECONDS))
          .hasCauseInstanceOf(DedupStoreUnavailableException.class);
      assertThat(executor.unrecordedOutcomes()).containsEntry(key, "SUCCESS");
      assertThatThrownBy(() -> executor.claim(key, null, null))
          .as("this process does not run the key's handler again before its SUCCESS is written")
          .isInstanceOf(DedupStoreUnavailableException.class);
    } finally {
      db.faulty().proxy().pass();
    }

    await().atMost(Duration.ofSeconds(15)).until(() -> executor.unrecordedOutcomes().isEmpty());
    assertThat(status("outage-mark")).isEqualTo(DedupStatus.SUCCESS);
    assertThat(executor.claim(key, null, null).isDuplicate()).isTrue();
  }

  /**
   * The claim that carries the previous record's SUCCESS fails with an exception that cannot
   * describe itself (its {@code toString()} and {@code getMessage()} throw, as a closed pool
   * session's may). Keeping the mark described the failure with {@code toString()}, which threw
   * before the mark was kept: the claim's caller got that throw instead, and the mark was neither
   * written nor retried, its future never completed (a poll's commit waiting for it) and its key
   * PROCESSING under a lease renewed for as long as the executor ran.
   */
  @Test
  void aMarkWhoseClaimFailsWithAnUnprintableExceptionIsKeptAndWrittenInTheBackground()
      throws Exception {
    IdempotentExecutor executor = executor(db.store(), Duration.ofMinutes(1));
    Thread caller = Thread.currentThread();
    AtomicInteger struck = new AtomicInteger();
    FaultPoints.install(
        point -> {
          if (point == FaultPoints.Point.BEFORE_SUCCESS_MARK
              && Thread.currentThread() == caller
              && struck.getAndIncrement() == 0) {
            throw new IllegalStateException() {
              private static final long serialVersionUID = 1L;

              @Override
              public String getMessage() {
                throw new IllegalStateException("the pool's session is closed");
              }

              @Override
              public String toString() {
                throw new IllegalStateException("the pool's session is closed");
              }
            };
          }
        });
    try {
      // A mark left waiting 5 ms goes to the writer instead (see the first test): tried until the
      // claim carried it and the fault struck there.
      for (int tries = 0; tries < 10 && struck.get() == 0; tries++) {
        DedupKey marked = DedupKey.of("payment", "unprintable-mark-" + tries);
        DedupKey next = DedupKey.of("payment", "unprintable-next-" + tries);
        CompletableFuture<Void> written =
            executor.claim(marked, null, null).completeWithNextClaim();
        Throwable thrown = catchThrowable(() -> executor.claim(next, null, null));
        if (struck.get() == 0) {
          written.get(10, TimeUnit.SECONDS);
          continue;
        }
        assertThat(written)
            .as("[what a poll's commit waits for] the carried SUCCESS's future")
            .failsWithin(Duration.ofSeconds(10))
            .withThrowableThat()
            .withCauseInstanceOf(DedupStoreUnavailableException.class);
        await()
            .atMost(Duration.ofSeconds(10))
            .alias("the carried SUCCESS written in the background")
            .until(() -> status(marked.bizKey()) == DedupStatus.SUCCESS);
        assertThat(thrown)
            .as("what the claim's caller is told")
            .isNotNull()
            .satisfies(
                e -> assertThat(e.getClass().getName()).contains("CompleteWithNextClaimTest"));
      }
    } finally {
      FaultPoints.install(null);
    }
    assertThat(struck).as("the fault struck the claim carrying a mark").hasValueGreaterThan(0);
    await()
        .atMost(Duration.ofSeconds(10))
        .untilAsserted(() -> assertThat(executor.unrecordedOutcomes()).isEmpty());
  }
}
