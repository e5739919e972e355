package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.catchThrowable;

import io.consumerdedup.core.internal.FaultPoints;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.micrometer.MicrometerDedupListener;
import io.consumerdedup.testing.ConnectionSource;
import io.consumerdedup.testing.StoreFixture;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/** {@link IdempotentExecutor#claimAll}: a batch of deliveries claimed in one round trip. */
class IdempotentExecutorBatchTest {
  @RegisterExtension static final StoreFixture db = new StoreFixture("executor_batch", 6);

  private IdempotentExecutor executor(IdempotentExecutor.Builder builder) {
    return db.executor(builder);
  }

  private static IdempotentExecutor.Delivery delivery(DedupKey key) {
    return new IdempotentExecutor.Delivery(key, null, "orders-0@" + key.bizKey());
  }

  @Test
  void eachDeliveryGetsItsOwnAnswerFromOneRoundTrip() throws Exception {
    AtomicInteger roundTrips = new AtomicInteger();
    IdempotentExecutor executor =
        executor(
            IdempotentExecutor.builder(db.store())
                .listener(
                    new DedupListener() {
                      @Override
                      public void claimTimed(DedupKey key, Duration elapsed) {
                        roundTrips.incrementAndGet();
                      }
                    }));
    DedupKey done = DedupKey.of("order", "batch-done");
    executor.execute(done, () -> null);
    DedupKey elsewhere = DedupKey.of("order", "batch-elsewhere");
    DedupClaim otherHolder =
        executor(IdempotentExecutor.builder(db.store())).claim(elsewhere, null, null);
    DedupKey fresh = DedupKey.of("order", "batch-new");
    roundTrips.set(0);

    DedupClaims claims =
        executor.claimAll(
            List.of(delivery(fresh), delivery(done), delivery(elsewhere), delivery(fresh)));

    assertThat(roundTrips).as("claim round trips for four deliveries").hasValue(1);
    DedupClaim first = claims.get(0);
    assertThat(first.isDuplicate()).isFalse();
    assertThat(claims.get(1).isDuplicate()).isTrue();
    assertThatThrownBy(() -> claims.get(2))
        .isInstanceOf(DedupInProgressException.class)
        .hasMessageContaining("batch-elsewhere");
    first.completeAsync().get(10, TimeUnit.SECONDS);
    // The later copy of a key is claimed when asked, after the first copy ended: a duplicate.
    assertThat(claims.get(3).isDuplicate()).isTrue();
    assertThat(roundTrips).hasValue(2);
    assertThat(db.store().find(fresh).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
    otherHolder.complete();
  }

  /**
   * A poll cut short (held back at an earlier record, or stopped by an Error) does not reach some
   * of its records, and the next poll claims them again: the application's metrics count each
   * delivery once, when a poll reaches it, not once per poll that claimed it.
   */
  @Test
  void recordsAPollDidNotReachAreCountedWhenAPollReachesThem() {
    SimpleMeterRegistry registry = new SimpleMeterRegistry();
    IdempotentExecutor executor =
        executor(
            IdempotentExecutor.builder(db.store()).listener(new MicrometerDedupListener(registry)));
    IdempotentExecutor other = executor(IdempotentExecutor.builder(db.store()));
    DedupKey done = DedupKey.of("reached", "done");
    other.execute(done, () -> null);
    DedupKey elsewhere = DedupKey.of("reached", "elsewhere");
    DedupClaim otherHolder = other.claim(elsewhere, null, null);
    DedupKey fresh = DedupKey.of("reached", "new");
    List<IdempotentExecutor.Delivery> poll =
        List.of(delivery(fresh), delivery(done), delivery(elsewhere));

    // The first poll is held back at its first record: none of its records is reached.
    executor.claimAll(poll).releaseUnended();
    DedupClaims claims = executor.claimAll(poll);
    claims.get(0).complete();
    assertThat(claims.get(1).isDuplicate()).isTrue();
    assertThatThrownBy(() -> claims.get(2)).isInstanceOf(DedupInProgressException.class);
    otherHolder.complete();

    for (String outcome : List.of("processed", "duplicate", "in_progress")) {
      assertThat(
              registry
                  .get(MicrometerDedupListener.OUTCOMES)
                  .tags("biz_type", "reached", "outcome", outcome)
                  .counter()
                  .count())
          .as("deliveries counted %s", outcome)
          .isEqualTo(1.0);
    }
  }

  @Test
  void claimsWhoseHandlerNeverRanAreReleasedWithoutCountingAnAttempt() {
    IdempotentExecutor executor = executor(IdempotentExecutor.builder(db.store()));
    DedupKey handled = DedupKey.of("order", "release-handled");
    DedupKey failedBefore = DedupKey.of("order", "release-failed-before");
    DedupKey fresh = DedupKey.of("order", "release-fresh");
    DedupClaim earlier = executor.claim(failedBefore, null, null);
    earlier.fail(new IllegalStateException("first try"));

    DedupClaims claims =
        executor.claimAll(List.of(delivery(handled), delivery(failedBefore), delivery(fresh)));
    claims.get(0).complete();
    claims.releaseUnended();

    assertThat(db.store().find(handled).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
    DedupRecord restored = db.store().find(failedBefore).orElseThrow();
    assertThat(restored.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(restored.attempts()).isEqualTo(1);
    assertThat(db.store().find(fresh)).isEmpty();
    // Another consumer claims them at once: nothing of the batch holds them any more.
    IdempotentExecutor other = executor(IdempotentExecutor.builder(db.store()));
    assertThat(other.claim(failedBefore, null, null).attempt()).isEqualTo(2);
    assertThat(other.claim(fresh, null, null).attempt()).isEqualTo(1);
  }

  @Test
  void aSingleClaimReleasedKeepsTheRecordAsItWasItsAttemptsAndLastErrorIncluded() {
    IdempotentExecutor executor = executor(IdempotentExecutor.builder(db.store()));
    DedupKey failedBefore = DedupKey.of("order", "release-one-failed");
    executor.claim(failedBefore, null, null).fail(new IllegalStateException("the bank said no"));
    DedupKey fresh = DedupKey.of("order", "release-one-fresh");

    DedupClaim again = executor.claim(failedBefore, null, "orders-0@7");
    assertThat(again.attempt()).isEqualTo(2);
    again.release();
    executor.claim(fresh, null, null).release();

    DedupRecord restored = db.store().find(failedBefore).orElseThrow();
    assertThat(restored.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(restored.attempts()).as("the released claim is not counted").isEqualTo(1);
    assertThat(restored.lastError()).hasValueSatisfying(e -> assertThat(e).contains("said no"));
    assertThat(db.store().find(fresh)).isEmpty();
    assertThatThrownBy(again::release)
        .isInstanceOf(IllegalStateException.class)
        .hasMessageContaining("already ended");
    IdempotentExecutor other = executor(IdempotentExecutor.builder(db.store()));
    assertThat(other.claim(failedBefore, null, null).attempt()).isEqualTo(2);
  }

  @Test
  void theLeasesOfABatchAreRenewedTogetherWhileItsHandlersRun() throws Exception {
    Duration lease = Duration.ofSeconds(1);
    IdempotentExecutor executor =
        executor(
            IdempotentExecutor.builder(db.store())
                .lease(lease)
                .renewalInterval(Duration.ofMillis(250)));
    List<DedupKey> keys = List.of(DedupKey.of("order", "renew-a"), DedupKey.of("order", "renew-b"));
    DedupClaims claims = executor.claimAll(keys.stream().map(k -> delivery(k)).toList());
    DedupClaim a = claims.get(0);
    DedupClaim b = claims.get(1);

    Thread.sleep(lease.multipliedBy(3).toMillis());

    IdempotentExecutor rival = executor(IdempotentExecutor.builder(db.store()));
    for (DedupKey key : keys) {
      assertThatThrownBy(() -> rival.claim(key, null, null))
          .as("a rival three leases later")
          .isInstanceOf(DedupInProgressException.class);
    }
    assertThat(a.isLeaseLost()).isFalse();
    a.complete();
    b.complete();
    assertThat(db.store().find(keys.get(1)).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
  }

  @Test
  void aMarkWrittenInTheBackgroundIsWrittenBeforeTheKeyIsClaimedAgain() throws Exception {
    IdempotentExecutor executor = executor(IdempotentExecutor.builder(db.store()));
    DedupKey key = DedupKey.of("order", "async-mark");
    DedupClaim claim = executor.claimAll(List.of(delivery(key))).get(0);

    claim.completeAsync();
    // Asked again at once, before the writer thread may have got to it: still a duplicate.
    DedupClaim again = executor.claim(key, null, null);

    assertThat(again.isDuplicate()).isTrue();
    assertThat(executor.unrecordedOutcomes()).isEmpty();
  }

  @Test
  void keysClaimedAsTheExecutorClosesAreGivenBackNotHeldForALease() {
    IdempotentExecutor closing = executor(IdempotentExecutor.builder(db.store()));
    IdempotentExecutor closingAlone = executor(IdempotentExecutor.builder(db.store()));
    // The consumer that takes the partitions over once this one has stopped.
    IdempotentExecutor next = executor(IdempotentExecutor.builder(db.store()));
    List<IdempotentExecutor.Delivery> poll =
        List.of(
            delivery(DedupKey.of("order", "closing-batch-1")),
            delivery(DedupKey.of("order", "closing-batch-2")));
    DedupKey alone = DedupKey.of("order", "closing-alone");
    // The application closes the executor while a poll's claims (or a record's) are on their way
    // to the database, as a container that outlasts its stop timeout does.
    Thread caller = Thread.currentThread();
    AtomicReference<IdempotentExecutor> toClose = new AtomicReference<>();
    FaultPoints.install(
        point -> {
          if (point != FaultPoints.Point.BEFORE_CLAIM || Thread.currentThread() != caller) {
            return; // the lease timer reaches points of its own
          }
          IdempotentExecutor executor = toClose.getAndSet(null);
          if (executor != null) {
            executor.close();
          }
        });
    Throwable batchRefused;
    Throwable aloneRefused;
    try {
      toClose.set(closing);
      batchRefused = catchThrowable(() -> closing.claimAll(poll));
      toClose.set(closingAlone);
      aloneRefused = catchThrowable(() -> closingAlone.claim(alone, null, "orders-0@alone"));
    } finally {
      FaultPoints.install(null);
    }

    // No handler ran for these keys: the next consumer runs them now, not a lease (5 min) later.
    List<String> answers = new ArrayList<>();
    for (DedupKey key : List.of(poll.get(0).key(), poll.get(1).key(), alone)) {
      try {
        answers.add(key.bizKey() + ": attempt " + next.claim(key, null, null).attempt());
      } catch (DedupInProgressException e) {
        answers.add(key.bizKey() + ": in progress");
      }
    }
    assertThat(answers)
        .containsExactly(
            "closing-batch-1: attempt 1", "closing-batch-2: attempt 1", "closing-alone: attempt 1");
    assertThat(batchRefused).isInstanceOf(DedupExecutorClosedException.class);
    assertThat(aloneRefused).isInstanceOf(DedupExecutorClosedException.class);
  }

  @Test
  void claimsWhoseReleaseMetAnErrorAreTakenUpByTheNextPoll() {
    // The pool throws an OutOfMemoryError once, when armed: for the release of a poll's claims.
    AtomicBoolean failNext = new AtomicBoolean();
    ConnectionSource failing =
        new ConnectionSource() {
          @Override
          public Connection getConnection() throws SQLException {
            if (failNext.compareAndSet(true, false)) {
              throw new OutOfMemoryError("Java heap space (injected)");
            }
            return db.dataSource().getConnection();
          }
        };
    IdempotentExecutor executor =
        executor(IdempotentExecutor.builder(JdbcDedupStore.builder(failing).build()));
    List<IdempotentExecutor.Delivery> poll =
        List.of(
            delivery(DedupKey.of("order", "release-error-1")),
            delivery(DedupKey.of("order", "release-error-2")));
    DedupClaims cutShort = executor.claimAll(poll);
    failNext.set(true);
    // The poll ends before its handlers ran (the loop stopped, say): its claims are given back.
    assertThatThrownBy(cutShort::releaseUnended).isInstanceOf(OutOfMemoryError.class);

    // The records come again: their handlers never ran, and they run now, not a lease later.
    DedupClaims again = executor.claimAll(poll);
    List<String> answers = new ArrayList<>();
    for (int i = 0; i < again.size(); i++) {
      try {
        DedupClaim claim = again.get(i);
        claim.complete();
        answers.add("held " + claim.attempt());
      } catch (DedupInProgressException e) {
        answers.add("in progress");
      }
    }
    assertThat(answers).containsExactly("held 1", "held 1");
  }

  /**
   * The application's listener throws an {@code Error} when told that the store failed (a metrics
   * backend's bug). It replaced the store's exception: the caller saw an Error where the store said
   * "retry later" (a container stops on an Error), and a poll's give-back of unused claims, which
   * the loops call where they expect nothing thrown, threw it.
   */
  @Test
  void aListenerThatThrowsAnErrorWhenTheStoreFailsDoesNotReplaceTheStoresAnswer() {
    AtomicBoolean refuse = new AtomicBoolean();
    ConnectionSource refusing =
        new ConnectionSource() {
          @Override
          public Connection getConnection() throws SQLException {
            if (refuse.get()) {
              throw new SQLException("Connection refused (injected)", "08001");
            }
            return db.dataSource().getConnection();
          }
        };
    DedupListener broken =
        new DedupListener() {
          @Override
          public void storeFailed(DedupKey key, DedupStoreException error) {
            throw new AssertionError("metrics backend bug");
          }
        };
    IdempotentExecutor executor =
        executor(
            IdempotentExecutor.builder(JdbcDedupStore.builder(refusing).retryMaxAttempts(1).build())
                .listener(broken));
    List<IdempotentExecutor.Delivery> poll =
        List.of(
            delivery(DedupKey.of("order", "listener-error-1")),
            delivery(DedupKey.of("order", "listener-error-2")));
    DedupClaims cutShort = executor.claimAll(poll);
    refuse.set(true);

    // The poll ends before its handlers ran: the give-back meets the database down, and says so
    // in the log only.
    cutShort.releaseUnended();
    Throwable refused = catchThrowable(() -> executor.claimAll(poll));
    assertThat(refused)
        .as("what the caller of a claim sees while the database is down")
        .isInstanceOf(DedupStoreUnavailableException.class);
    assertThat(refused.getSuppressed())
        .singleElement()
        .satisfies(e -> assertThat(e).hasMessage("metrics backend bug"));

    refuse.set(false);
    DedupClaims again = executor.claimAll(poll);
    List<Integer> attempts = new ArrayList<>();
    for (int i = 0; i < again.size(); i++) {
      attempts.add(again.get(i).attempt());
    }
    assertThat(attempts)
        .as("the records taken up at once, their handlers never ran")
        .containsExactly(1, 1);
  }
}
