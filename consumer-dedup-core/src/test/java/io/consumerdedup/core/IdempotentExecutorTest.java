package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.internal.FaultPoints;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.micrometer.MicrometerDedupListener;
import io.consumerdedup.testing.StoreFixture;
import io.consumerdedup.testing.TestDatabase;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.io.IOException;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Supplier;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.postgresql.ds.PGSimpleDataSource;
import org.slf4j.LoggerFactory;

/** The engine's behaviour as a caller sees it, on a real PostgreSQL. */
class IdempotentExecutorTest {
  @RegisterExtension static final StoreFixture db = new StoreFixture("executor", 8);

  private IdempotentExecutor executor(IdempotentExecutor.Builder builder) {
    return db.executor(builder);
  }

  private IdempotentExecutor executor() {
    return executor(IdempotentExecutor.builder(db.store()));
  }

  @Test
  void theSecondDeliveryIsADuplicateAndTheHandlerRunsOnce() {
    IdempotentExecutor executor = executor();
    DedupKey key = DedupKey.of("payment", "ORD-1");
    AtomicInteger charges = new AtomicInteger();

    DedupResult<String> first = executor.execute(key, () -> "charged " + charges.incrementAndGet());
    DedupResult<String> second =
        executor.execute(key, () -> "charged " + charges.incrementAndGet());

    assertThat(first.outcome()).isEqualTo(Outcome.PROCESSED);
    assertThat(first.value()).isEqualTo("charged 1");
    assertThat(first.attempt()).isEqualTo(1);
    assertThat(second.outcome()).isEqualTo(Outcome.DUPLICATE);
    assertThat(second.value()).isNull();
    assertThat(charges).hasValue(1);
    DedupRecord record = db.store().find(key).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(record.owner()).isEqualTo(executor.ownerId());
  }

  @Test
  void aListenerThatThrowsAnErrorOnFailedDoesNotReplaceTheHandlersException() {
    AssertionError listenerError = new AssertionError("metrics registry broken");
    IdempotentExecutor executor =
        executor(
            IdempotentExecutor.builder(db.store())
                .listener(
                    new DedupListener() {
                      @Override
                      public void failed(DedupKey key, int attempt, Throwable error) {
                        throw listenerError;
                      }
                    }));
    DedupKey key = DedupKey.of("payment", "ORD-listener-error");

    assertThatThrownBy(
            () ->
                executor.execute(
                    key,
                    () -> {
                      throw new IllegalStateException("bank timed out");
                    }))
        .as("the handler's own exception, which the caller's retry or dead-letter policy reads")
        .isInstanceOf(IllegalStateException.class)
        .hasMessage("bank timed out")
        .hasSuppressedException(listenerError);
    assertThat(db.store().find(key).orElseThrow().status()).isEqualTo(DedupStatus.FAILED);
    assertThat(executor.execute(key, () -> "charged").attempt()).as("retried").isEqualTo(2);
  }

  /**
   * A listener that throws an Error on {@code leaseLost}; the handler lets another consumer take
   * its key over (its lease having run out) before it ends, so its outcome is fenced out.
   */
  private IdempotentExecutor takenOverWithABrokenListener(List<String> told) {
    return executor(
        IdempotentExecutor.builder(db.store())
            .ownerId("zombie")
            .listener(
                new DedupListener() {
                  @Override
                  public void leaseLost(DedupKey key, int attempt) {
                    told.add("leaseLost");
                    throw new AssertionError("metrics backend bug");
                  }

                  @Override
                  public void failed(DedupKey key, int attempt, Throwable error) {
                    told.add("failed");
                  }
                }));
  }

  private void takeOver(DedupKey key) throws SQLException {
    execute(
        db.dataSource(),
        "UPDATE consumer_dedup SET lease_until = now() - interval '1 second' WHERE biz_key = '"
            + key.bizKey()
            + "'");
    IdempotentExecutor successor =
        executor(IdempotentExecutor.builder(db.store()).ownerId("successor"));
    assertThat(successor.claim(key, null, null).attempt()).as("taken over").isEqualTo(2);
  }

  @Test
  void aListenerThatThrowsAnErrorOnALostLeaseDoesNotReplaceTheHandlersException() {
    List<String> told = new CopyOnWriteArrayList<>();
    IdempotentExecutor zombie = takenOverWithABrokenListener(told);
    DedupKey key = DedupKey.of("payment", "ORD-lost-failed");

    assertThatThrownBy(
            () ->
                zombie.execute(
                    key,
                    () -> {
                      takeOver(key);
                      throw new IllegalStateException("bank timed out");
                    }))
        .as("the handler's own exception, which the caller's retry or dead-letter policy reads")
        .isInstanceOf(IllegalStateException.class)
        .hasMessage("bank timed out")
        .satisfies(
            thrown ->
                assertThat(thrown.getSuppressed())
                    .hasAtLeastOneElementOfType(AssertionError.class));
    assertThat(told).as("the lease loss and the failure both told").contains("leaseLost", "failed");
    assertThat(db.store().find(key).orElseThrow().owner())
        .as("the new holder's claim stands")
        .isEqualTo("successor");
  }

  @Test
  void aListenerThatThrowsAnErrorOnALostLeaseStillSaysTheSuccessWasNotRecorded() {
    List<String> told = new CopyOnWriteArrayList<>();
    IdempotentExecutor zombie = takenOverWithABrokenListener(told);
    DedupKey key = DedupKey.of("payment", "ORD-lost-success");

    assertThatThrownBy(
            () ->
                zombie.execute(
                    key,
                    () -> {
                      takeOver(key);
                      return "charged";
                    }))
        .as("a lost lease: retry later, the new holder decides")
        .isInstanceOf(DedupLeaseLostException.class)
        .satisfies(
            thrown ->
                assertThat(thrown.getSuppressed())
                    .hasAtLeastOneElementOfType(AssertionError.class));
    assertThat(told).contains("leaseLost");
    assertThat(db.store().find(key).orElseThrow().status()).isEqualTo(DedupStatus.PROCESSING);
  }

  @Test
  void aClaimEndedByTheCallerRecordsItsOutcomeOnce() {
    IdempotentExecutor executor = executor();
    DedupKey key = DedupKey.of("payment", "ORD-claim-1");

    DedupClaim first = executor.claim(key, null, "payments-0@1");
    assertThat(first.isDuplicate()).isFalse();
    first.fail(new IllegalStateException("bank down"));
    assertThat(db.store().find(key).orElseThrow().status()).isEqualTo(DedupStatus.FAILED);
    assertThatThrownBy(first::complete)
        .isInstanceOf(IllegalStateException.class)
        .hasMessage("The claim on payment/ORD-claim-1 was already ended");

    DedupClaim retry = executor.claim(key, null, "payments-0@2");
    assertThat(retry.attempt()).isEqualTo(2);
    retry.complete();

    DedupClaim copy = executor.claim(key, null, "payments-0@3");
    assertThat(copy.isDuplicate()).isTrue();
    assertThat(copy.attempt()).isEqualTo(2);
    assertThatThrownBy(copy::complete)
        .isInstanceOf(IllegalStateException.class)
        .hasMessageContaining("Cannot complete a duplicate of payment/ORD-claim-1");
    assertThat(db.store().find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
  }

  @Test
  void aFailedHandlerIsRetriedByTheNextDeliveryAndThenNeverAgain() {
    IdempotentExecutor executor = executor();
    DedupKey key = DedupKey.of("payment", "ORD-2");
    IllegalStateException bankTimeout = new IllegalStateException("bank timed out");
    AtomicInteger calls = new AtomicInteger();

    assertThatThrownBy(
            () ->
                executor.execute(
                    key,
                    () -> {
                      calls.incrementAndGet();
                      throw bankTimeout;
                    }))
        .isSameAs(bankTimeout);
    DedupRecord failed = db.store().find(key).orElseThrow();
    assertThat(failed.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(failed.lastError()).contains("java.lang.IllegalStateException: bank timed out");

    DedupResult<Integer> retry = executor.execute(key, calls::incrementAndGet);
    DedupResult<Integer> after = executor.execute(key, calls::incrementAndGet);

    assertThat(retry.outcome()).isEqualTo(Outcome.PROCESSED);
    assertThat(retry.attempt()).isEqualTo(2);
    assertThat(after.outcome()).isEqualTo(Outcome.DUPLICATE);
    assertThat(calls).hasValue(2);
    assertThat(db.store().find(key).orElseThrow().attempts()).isEqualTo(2);
  }

  /**
   * A handler whose nested call for another key meets that key held elsewhere throws its {@code
   * DedupInProgressException}: not the handler's failure, so its claim is given back, the key's row
   * as the earlier, real failure left it (attempts, last error), and the key not held meanwhile.
   */
  @Test
  void aNestedCallInProgressElsewhereGivesTheClaimBackUncounted() throws Exception {
    IdempotentExecutor holder =
        executor(IdempotentExecutor.builder(db.store()).ownerId("holder-2"));
    IdempotentExecutor executor = executor();
    DedupKey order = DedupKey.of("order", "ORD-N1");
    DedupKey stock = DedupKey.of("stock", "ORD-N1");
    assertThatThrownBy(
            () ->
                executor.execute(
                    order,
                    () -> {
                      throw new IllegalStateException("carrier timed out");
                    }))
        .hasMessage("carrier timed out");
    BlockedRun reserving = new BlockedRun(holder, stock);
    Callable<String> reserveThenOrder = () -> executor.execute(stock, () -> "reserved").value();

    for (int delivery = 0; delivery < 3; delivery++) {
      assertThatThrownBy(() -> executor.execute(order, reserveThenOrder))
          .isInstanceOf(DedupInProgressException.class)
          .hasMessageContaining("holder-2");
      DedupRecord row = db.store().find(order).orElseThrow();
      assertThat(row.status()).isEqualTo(DedupStatus.FAILED);
      assertThat(row.attempts()).as("attempts: the carrier's only").isEqualTo(1);
      assertThat(row.lastError()).hasValueSatisfying(e -> assertThat(e).contains("carrier"));
    }

    assertThat(reserving.finish().outcome()).isEqualTo(Outcome.PROCESSED);
    DedupResult<String> applied = executor.execute(order, () -> "ordered");
    assertThat(applied.outcome()).isEqualTo(Outcome.PROCESSED);
    assertThat(applied.attempt()).isEqualTo(2);
  }

  /**
   * A nested call on the handler's own key meets the handler's own claim, which ends only when the
   * handler does: waiting never helps, so each delivery counts an attempt, and the adapter's limit
   * of attempts ends it.
   */
  @Test
  void aNestedCallOnItsOwnKeyCountsEveryAttempt() {
    IdempotentExecutor executor = executor();
    DedupKey order = DedupKey.of("order", "ORD-N2");
    Callable<String> orderAgain = () -> executor.execute(order, () -> "ordered").value();

    for (int delivery = 1; delivery <= 3; delivery++) {
      int attempts = delivery;
      assertThatThrownBy(() -> executor.execute(order, orderAgain))
          .isInstanceOf(DedupInProgressException.class)
          .hasMessageContaining(executor.ownerId());
      assertThat(db.store().find(order))
          .as("the order's row after delivery " + delivery)
          .hasValueSatisfying(
              row -> {
                assertThat(row.status()).isEqualTo(DedupStatus.FAILED);
                assertThat(row.attempts()).as("attempts").isEqualTo(attempts);
              });
    }
  }

  /**
   * Retry-later exceptions that waiting does not cure, thrown by the handler itself (a
   * misconfigured nested call, a store refusing it for want of a permission): counted, so that an
   * adapter dead-letters the record once its attempts are spent; an unreachable database is waited
   * for uncounted.
   */
  @Test
  void aHandlersRetryLaterExceptionThatWaitingCannotCureCountsTheAttempt() {
    IdempotentExecutor executor = executor();
    DedupKey misconfigured = DedupKey.of("order", "ORD-C1");
    DedupKey refused = DedupKey.of("order", "ORD-C2");
    DedupKey unreachable = DedupKey.of("order", "ORD-C3");

    for (int delivery = 1; delivery <= 2; delivery++) {
      assertThatThrownBy(
              () ->
                  executor.execute(
                      misconfigured,
                      () -> {
                        throw new DedupConfigurationException(
                            "no executor for the nested call", null, null);
                      }))
          .isInstanceOf(DedupConfigurationException.class);
      assertThatThrownBy(
              () ->
                  executor.execute(
                      refused,
                      () -> {
                        throw new DedupStoreException(
                            "permission denied for table dedup_other", null, null, null);
                      }))
          .isInstanceOf(DedupStoreException.class);
      assertThatThrownBy(
              () ->
                  executor.execute(
                      unreachable,
                      () -> {
                        throw new DedupStoreUnavailableException(
                            "connection refused", null, null, null);
                      }))
          .isInstanceOf(DedupStoreUnavailableException.class);
    }

    assertThat(db.store().find(misconfigured).map(DedupRecord::attempts))
        .as("attempts of the misconfigured call")
        .hasValue(2);
    assertThat(db.store().find(refused).map(DedupRecord::attempts))
        .as("attempts of the refused call")
        .hasValue(2);
    assertThat(db.store().find(unreachable))
        .as("the record of a handler whose database was away: given back, as never claimed")
        .isEmpty();
  }

  @Test
  void checkedExceptionsAreWrappedWithTheOriginalAsCauseAndErrorsPassUnchanged() {
    IdempotentExecutor executor = executor();
    IOException io = new IOException("socket closed");
    AssertionError error = new AssertionError("boom");

    assertThatThrownBy(
            () ->
                executor.execute(
                    DedupKey.of("payment", "ORD-3"),
                    () -> {
                      throw io;
                    }))
        .isInstanceOf(DedupHandlerException.class)
        .hasCause(io)
        .hasMessageContaining("payment/ORD-3");
    assertThatThrownBy(
            () ->
                executor.execute(
                    DedupKey.of("payment", "ORD-4"),
                    () -> {
                      throw error;
                    }))
        .isSameAs(error);
    assertThat(db.store().find(DedupKey.of("payment", "ORD-3")).orElseThrow().status())
        .isEqualTo(DedupStatus.FAILED);
    assertThat(db.store().find(DedupKey.of("payment", "ORD-4")).orElseThrow().status())
        .isEqualTo(DedupStatus.FAILED);
  }

  @Test
  void whileAnotherHolderRunsTheCopyIsToldInProgressThenDuplicate() throws Exception {
    IdempotentExecutor holder =
        executor(IdempotentExecutor.builder(db.store()).ownerId("holder-1"));
    IdempotentExecutor copy = executor();
    DedupKey key = DedupKey.of("payment", "ORD-5");
    BlockedRun first = new BlockedRun(holder, key);

    assertThatThrownBy(() -> copy.execute(key, () -> "copy ran"))
        .isInstanceOfSatisfying(
            DedupInProgressException.class,
            e -> {
              assertThat(e.holder()).isEqualTo("holder-1");
              assertThat(e.leaseUntil()).isPresent();
              assertThat(e.key()).contains(key);
            })
        .hasMessageContaining("Key is being processed by holder-1")
        .hasMessageContaining("retry later");

    assertThat(first.finish().outcome()).isEqualTo(Outcome.PROCESSED);
    assertThat(copy.execute(key, () -> "copy ran").outcome()).isEqualTo(Outcome.DUPLICATE);
  }

  @Test
  void theWaitPolicyWaitsForTheHolderAndThenSkips() throws Exception {
    IdempotentExecutor holder = executor();
    IdempotentExecutor waiting =
        executor(
            IdempotentExecutor.builder(db.store())
                .inProgressPolicy(InProgressPolicy.WAIT)
                .waitTimeout(Duration.ofSeconds(20)));
    DedupKey key = DedupKey.of("payment", "ORD-6");
    CountDownLatch running = new CountDownLatch(1);
    AtomicInteger runs = new AtomicInteger();
    CompletableFuture<?> first =
        CompletableFuture.runAsync(
            () ->
                holder.execute(
                    key,
                    () -> {
                      running.countDown();
                      Thread.sleep(700);
                      return runs.incrementAndGet();
                    }));
    assertThat(running.await(10, TimeUnit.SECONDS)).isTrue();

    DedupResult<Integer> result = waiting.execute(key, runs::incrementAndGet);

    assertThat(result.outcome()).isEqualTo(Outcome.DUPLICATE);
    assertThat(runs).hasValue(1);
    first.get(10, TimeUnit.SECONDS);
  }

  @Test
  void theWaitPolicyGivesUpAfterItsTimeout() throws Exception {
    IdempotentExecutor holder = executor();
    IdempotentExecutor waiting =
        executor(
            IdempotentExecutor.builder(db.store())
                .inProgressPolicy(InProgressPolicy.WAIT)
                .waitTimeout(Duration.ofMillis(300)));
    DedupKey key = DedupKey.of("payment", "ORD-7");
    BlockedRun first = new BlockedRun(holder, key);

    long start = System.nanoTime();
    assertThatThrownBy(() -> waiting.execute(key, () -> "ran"))
        .isInstanceOf(DedupInProgressException.class);
    assertThat(Duration.ofNanos(System.nanoTime() - start))
        .isGreaterThanOrEqualTo(Duration.ofMillis(300));

    first.finish();
  }

  @Test
  void aDifferentPayloadUnderTheSameKeyIsAConflictAndIsNotApplied() {
    DedupKey key = DedupKey.of("payment", "ORD-8");
    AtomicInteger charges = new AtomicInteger();
    executor().execute(key, "amount=10.00", charges::incrementAndGet);

    assertThatThrownBy(() -> executor().execute(key, "amount=99.00", charges::incrementAndGet))
        .isInstanceOfSatisfying(
            DedupKeyConflictException.class,
            e -> {
              assertThat(e.storedFingerprint()).isEqualTo("amount=10.00");
              assertThat(e.deliveredFingerprint()).isEqualTo("amount=99.00");
            })
        .hasMessageContaining("payment/ORD-8");
    DedupResult<Integer> tolerated =
        executor(
                IdempotentExecutor.builder(db.store())
                    .conflictPolicy(ConflictPolicy.TREAT_AS_DUPLICATE))
            .execute(key, "amount=99.00", charges::incrementAndGet);
    DedupResult<Integer> same = executor().execute(key, "amount=10.00", charges::incrementAndGet);

    assertThat(tolerated.outcome()).isEqualTo(Outcome.DUPLICATE);
    assertThat(same.outcome()).isEqualTo(Outcome.DUPLICATE);
    assertThat(charges).hasValue(1);
  }

  @Test
  void treatAsDuplicateAnswersOnlyForAnActionThatSucceeded() throws Exception {
    IdempotentExecutor tolerant =
        executor(
            IdempotentExecutor.builder(db.store())
                .conflictPolicy(ConflictPolicy.TREAT_AS_DUPLICATE));
    AtomicInteger charges = new AtomicInteger();
    DedupKey failed = DedupKey.of("payment", "ORD-8-failed");
    assertThatThrownBy(
            () ->
                tolerant.execute(
                    failed,
                    "amount=10.00",
                    () -> {
                      throw new IllegalStateException("bank down");
                    }))
        .isInstanceOf(IllegalStateException.class);

    // Nothing succeeded under the key: the other payload is a conflict, not a duplicate.
    assertThatThrownBy(() -> tolerant.execute(failed, "amount=99.00", charges::incrementAndGet))
        .isInstanceOf(DedupKeyConflictException.class);

    DedupKey running = DedupKey.of("payment", "ORD-8-running");
    BlockedRun holder = new BlockedRun(executor(), running, "amount=10.00");
    // Still running: the other payload waits for its outcome, it is not answered as done.
    assertThatThrownBy(() -> tolerant.execute(running, "amount=99.00", charges::incrementAndGet))
        .isInstanceOf(DedupInProgressException.class);
    holder.finish();
    assertThat(tolerant.execute(running, "amount=99.00", charges::incrementAndGet).outcome())
        .isEqualTo(Outcome.DUPLICATE);
    assertThat(charges).hasValue(0);
  }

  @Test
  void aDatabaseThatIsDownFailsTheClaimAndTheHandlerDoesNotRun() {
    PGSimpleDataSource down = new PGSimpleDataSource();
    down.setURL("jdbc:postgresql://127.0.0.1:1/test?connectTimeout=1");
    JdbcDedupStore unreachable =
        JdbcDedupStore.builder(down)
            .retryMaxAttempts(3)
            .retryInitialBackoff(Duration.ofMillis(10))
            .retryMaxBackoff(Duration.ofMillis(20))
            .build();
    AtomicInteger charges = new AtomicInteger();

    assertThatThrownBy(
            () ->
                executor(IdempotentExecutor.builder(unreachable))
                    .execute(
                        DedupKey.of("payment", "ORD-9"),
                        null,
                        "payments-0@9",
                        charges::incrementAndGet))
        .isInstanceOf(DedupStoreException.class)
        .hasMessageContaining("Dedup store claim on table consumer_dedup failed after 3 tries")
        .hasMessageContaining("[key payment/ORD-9]")
        .hasMessageContaining("[from payments-0@9]");
    assertThat(charges).hasValue(0);
  }

  @Test
  void successThatCannotBeWrittenIsKeptWrittenLaterAndTheHandlerNeverRunsAgain()
      throws SQLException {
    String brokenSchema = TestDatabase.newSchema("complete_fails");
    try (HikariDataSource brokenPool = TestDatabase.dataSource(brokenSchema, 2)) {
      JdbcDedupStore brokenStore = JdbcDedupStore.builder(brokenPool).build();
      IdempotentExecutor executor = executor(IdempotentExecutor.builder(brokenStore));
      DedupKey key = DedupKey.of("payment", "ORD-10");
      AtomicInteger charges = new AtomicInteger();

      assertThatThrownBy(
              () ->
                  executor.execute(
                      key,
                      () -> {
                        charges.incrementAndGet();
                        // The database loses the table while the handler runs.
                        execute(
                            brokenPool,
                            "ALTER TABLE consumer_dedup RENAME TO consumer_dedup_moved");
                        return "charged";
                      }))
          .isInstanceOf(DedupStoreUnavailableException.class)
          .hasMessageContaining("Handler succeeded but SUCCESS is not recorded yet")
          .hasMessageContaining("payment/ORD-10");
      assertThat(executor.unrecordedOutcomes()).containsEntry(key, "SUCCESS");

      // A redelivery meanwhile is told to come back later: the handler does not run again.
      assertThatThrownBy(() -> executor.execute(key, charges::incrementAndGet))
          .isInstanceOf(DedupStoreUnavailableException.class)
          .hasMessageContaining(
              "SUCCESS of an earlier attempt (1) of this key is not recorded yet");

      execute(brokenPool, "ALTER TABLE consumer_dedup_moved RENAME TO consumer_dedup");
      org.awaitility.Awaitility.await()
          .atMost(Duration.ofSeconds(10))
          .until(() -> brokenStore.find(key).orElseThrow().status() == DedupStatus.SUCCESS);
      assertThat(executor.execute(key, charges::incrementAndGet).outcome())
          .isEqualTo(Outcome.DUPLICATE);
      assertThat(charges).as("charges").hasValue(1);
      assertThat(executor.unrecordedOutcomes()).isEmpty();
    } finally {
      TestDatabase.dropSchema(brokenSchema);
    }
  }

  @Test
  void aZombieWhoseLeaseWasTakenOverCannotOverwriteTheNewHolder() throws Exception {
    List<String> events = new CopyOnWriteArrayList<>();
    DedupListener recording =
        new DedupListener() {
          @Override
          public void leaseLost(DedupKey key, int attempt) {
            events.add("leaseLost " + key + " attempt " + attempt);
          }
        };
    IdempotentExecutor zombie =
        executor(IdempotentExecutor.builder(db.store()).ownerId("zombie").listener(recording));
    IdempotentExecutor successor =
        executor(IdempotentExecutor.builder(db.store()).ownerId("successor"));
    DedupKey key = DedupKey.of("payment", "ORD-11");
    BlockedRun zombieRun = new BlockedRun(zombie, key);
    execute(
        db.dataSource(),
        "UPDATE consumer_dedup SET lease_until = now() - interval '1 second' WHERE biz_key = 'ORD-11'");
    BlockedRun successorRun = new BlockedRun(successor, key);

    assertThatThrownBy(zombieRun::finish)
        .hasCauseInstanceOf(DedupLeaseLostException.class)
        .hasMessageContaining(
            "Lease of attempt 1 was taken over by another consumer before SUCCESS");

    DedupRecord record = db.store().find(key).orElseThrow();
    assertThat(record.status())
        .as("the zombie's SUCCESS was refused")
        .isEqualTo(DedupStatus.PROCESSING);
    assertThat(record.owner()).isEqualTo("successor");
    assertThat(record.attempts()).isEqualTo(2);
    assertThat(events).containsExactly("leaseLost payment/ORD-11 attempt 1");
    assertThat(successorRun.finish().attempt()).isEqualTo(2);
    assertThat(db.store().find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
  }

  @Test
  void aSlowHandlerKeepsItsLeaseBeyondTwiceItsLength() throws Exception {
    IdempotentExecutor slow =
        executor(
            IdempotentExecutor.builder(db.store())
                .lease(Duration.ofSeconds(1))
                .renewalInterval(Duration.ofMillis(250)));
    IdempotentExecutor copy =
        executor(IdempotentExecutor.builder(db.store()).lease(Duration.ofSeconds(1)));
    DedupKey key = DedupKey.of("report", "slow-1");
    AtomicInteger runs = new AtomicInteger();
    CountDownLatch running = new CountDownLatch(1);
    CompletableFuture<DedupResult<Integer>> slowRun =
        CompletableFuture.supplyAsync(
            () ->
                slow.execute(
                    key,
                    () -> {
                      running.countDown();
                      Thread.sleep(2_600);
                      return runs.incrementAndGet();
                    }));
    assertThat(running.await(10, TimeUnit.SECONDS)).isTrue();

    int inProgressAnswers = 0;
    while (!slowRun.isDone()) {
      try {
        copy.execute(key, runs::incrementAndGet);
        if (!slowRun.isDone()) {
          throw new AssertionError("the copy got in while the slow handler was still running");
        }
      } catch (DedupInProgressException expected) {
        inProgressAnswers++;
      }
      Thread.sleep(100);
    }

    assertThat(slowRun.get().outcome()).isEqualTo(Outcome.PROCESSED);
    assertThat(inProgressAnswers).isGreaterThan(10);
    assertThat(copy.execute(key, runs::incrementAndGet).outcome()).isEqualTo(Outcome.DUPLICATE);
    assertThat(runs).hasValue(1);
    assertThat(db.store().find(key).orElseThrow().attempts()).isEqualTo(1);
  }

  @Test
  void leaseExpiryIsJudgedByTheDatabaseClockNotTheJvms() throws Exception {
    // The engine reads no wall-clock time; moving lease_until on the database's clock is all
    // that decides. A one-hour lease ended "a second ago" by the database is taken over at once,
    // and a 200 ms lease the database extended is still live long after the JVM saw it expire.
    DedupKey hourLease = DedupKey.of("clock", "hour");
    db.store()
        .claim(
            new ClaimRequest(
                hourLease, "crashed", Duration.ofHours(1), Duration.ofDays(1), null, null));
    execute(
        db.dataSource(),
        "UPDATE consumer_dedup SET lease_until = now() - interval '1 second' WHERE biz_key = 'hour'");
    assertThat(executor().execute(hourLease, () -> "taken over").attempt()).isEqualTo(2);

    DedupKey shortLease = DedupKey.of("clock", "short");
    db.store()
        .claim(
            new ClaimRequest(
                shortLease, "slow", Duration.ofMillis(200), Duration.ofDays(1), null, null));
    execute(
        db.dataSource(),
        "UPDATE consumer_dedup SET lease_until = now() + interval '1 hour' WHERE biz_key = 'short'");
    Thread.sleep(400);
    assertThatThrownBy(() -> executor().execute(shortLease, () -> "too early"))
        .isInstanceOf(DedupInProgressException.class);
  }

  @Test
  void theSessionTimeZoneOfTheseTestsIsNotUtc() throws SQLException {
    try (Connection connection = db.dataSource().getConnection();
        Statement statement = connection.createStatement();
        var row = statement.executeQuery("SHOW TimeZone")) {
      row.next();
      assertThat(row.getString(1)).isNotIn("UTC", "Etc/UTC", "GMT");
    }
  }

  @Test
  void outcomesAreCountedInMicrometer() {
    SimpleMeterRegistry registry = new SimpleMeterRegistry();
    IdempotentExecutor executor =
        executor(
            IdempotentExecutor.builder(db.store()).listener(new MicrometerDedupListener(registry)));
    DedupKey key = DedupKey.of("metrics", "m-1");
    executor.execute(key, () -> 1);
    executor.execute(key, () -> 1);
    executor.execute(key, () -> 1);
    assertThatThrownBy(
            () ->
                executor.execute(
                    DedupKey.of("metrics", "m-2"),
                    () -> {
                      throw new IllegalStateException("down");
                    }))
        .isInstanceOf(IllegalStateException.class);

    assertThat(
            registry
                .get("consumer.dedup.outcomes")
                .tags("biz_type", "metrics", "outcome", "processed")
                .counter()
                .count())
        .isEqualTo(1.0);
    assertThat(
            registry
                .get("consumer.dedup.outcomes")
                .tags("biz_type", "metrics", "outcome", "duplicate")
                .counter()
                .count())
        .isEqualTo(2.0);
    assertThat(
            registry
                .get("consumer.dedup.outcomes")
                .tags("biz_type", "metrics", "outcome", "failed")
                .counter()
                .count())
        .isEqualTo(1.0);
    assertThat(registry.get("consumer.dedup.claim").tags("biz_type", "metrics").timer().count())
        .isEqualTo(4);
  }

  @Test
  void aListenerThatThrowsDoesNotBreakProcessing() {
    DedupListener broken =
        new DedupListener() {
          @Override
          public void claimed(DedupKey key, int attempt) {
            throw new IllegalStateException("metrics backend down");
          }
        };
    IdempotentExecutor executor = executor(IdempotentExecutor.builder(db.store()).listener(broken));

    assertThat(executor.execute(DedupKey.of("payment", "ORD-12"), () -> "ok").value())
        .isEqualTo("ok");
    assertThat(db.store().find(DedupKey.of("payment", "ORD-12")).orElseThrow().status())
        .isEqualTo(DedupStatus.SUCCESS);
  }

  /**
   * A listener of the application that throws an {@code Error} as a SUCCESS is reported (a bug in a
   * metrics backend) does not leave whoever waits for that SUCCESS waiting for good: the mark is
   * written, and its future says so.
   */
  @Test
  void aListenerThatThrowsAnErrorDoesNotLeaveAWrittenMarkUnanswered() throws Exception {
    DedupListener broken =
        new DedupListener() {
          @Override
          public void completed(DedupKey key, int attempt, Duration handlerTime) {
            throw new AssertionError("metrics backend bug");
          }
        };
    IdempotentExecutor executor = executor(IdempotentExecutor.builder(db.store()).listener(broken));
    DedupKey key = DedupKey.of("listener-error", "ORD-1");

    DedupClaim claim = executor.claim(key, null, "orders-0@1");
    claim.completeAsync().get(10, TimeUnit.SECONDS);

    assertThat(db.store().find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
  }

  /**
   * As above, with an {@code Error} whose {@code getMessage()} throws: the writer's ERROR line
   * about the listener threw as Logback read the message, and the writer then reported the written
   * mark as a write that failed ("Writing SUCCESS marks failed unexpectedly; retrying in the
   * background", naming what the message threw): an operator was sent looking for a database fault
   * that never was.
   */
  @Test
  void aListenerErrorThatCannotDescribeItselfIsLoggedAsTheListenersNotAsAFailedWrite()
      throws Exception {
    AtomicInteger told = new AtomicInteger();
    DedupListener broken =
        new DedupListener() {
          @Override
          public void completed(DedupKey key, int attempt, Duration handlerTime) {
            told.incrementAndGet();
            throw new AssertionError() {
              private static final long serialVersionUID = 1L;

              @Override
              public String getMessage() {
                throw new IllegalStateException("the metrics registry is closed");
              }
            };
          }
        };
    IdempotentExecutor executor = executor(IdempotentExecutor.builder(db.store()).listener(broken));
    DedupKey key = DedupKey.of("listener-unprintable", "ORD-1");
    ListAppender<ILoggingEvent> logged = new ListAppender<>();
    Logger writerLog = (Logger) LoggerFactory.getLogger("io.consumerdedup.core.internal");
    logged.start();
    writerLog.addAppender(logged);
    try {
      assertThat(executor.claim(key, null, "orders-0@1").completeAsync())
          .as("the mark's future")
          .succeedsWithin(Duration.ofSeconds(10));
      await()
          .atMost(Duration.ofSeconds(10))
          .until(() -> logged.list.stream().anyMatch(event -> event.getLevel() == Level.ERROR));
    } finally {
      writerLog.detachAppender(logged);
    }

    assertThat(told).as("the listener told of the SUCCESS, and threw").hasValue(1);
    assertThat(db.store().find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(logged.list)
        .filteredOn(event -> event.getLevel() == Level.ERROR)
        .extracting(ILoggingEvent::getFormattedMessage)
        .as("[the ERROR lines]")
        .containsExactly("Settling written SUCCESS marks failed (the listener threw)");
  }

  @Test
  void aListenerThatThrowsAnErrorForOneMarkDoesNotFailTheOthersWrittenWithIt() throws Exception {
    DedupListener broken =
        new DedupListener() {
          @Override
          public void completed(DedupKey key, int attempt, Duration handlerTime) {
            if (key.bizKey().equals("ORD-A")) {
              throw new AssertionError("metrics backend bug");
            }
          }
        };
    IdempotentExecutor executor = executor(IdempotentExecutor.builder(db.store()).listener(broken));
    // The writer's first write (ORD-0 alone) waits until the next marks are queued, so that they
    // go together in the next one, in order: A, B, C. They are queued only once that first write
    // has begun: a writer thread slow to start would otherwise find all four queued at once.
    CountDownLatch firstWriteBegun = new CountDownLatch(1);
    CountDownLatch queued = new CountDownLatch(1);
    AtomicInteger writes = new AtomicInteger();
    FaultPoints.install(
        point -> {
          if (point == FaultPoints.Point.BEFORE_SUCCESS_MARK
              && Thread.currentThread().getName().equals("consumer-dedup-outcome-writer")
              && writes.incrementAndGet() == 1) {
            firstWriteBegun.countDown();
            try {
              queued.await(10, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
              Thread.currentThread().interrupt();
            }
          }
        });
    List<CompletableFuture<Void>> marks = new ArrayList<>();
    try {
      CompletableFuture<Void> first =
          executor.claim(DedupKey.of("listener-error", "ORD-0"), null, null).completeAsync();
      assertThat(firstWriteBegun.await(10, TimeUnit.SECONDS)).as("the first write began").isTrue();
      for (String order : List.of("ORD-A", "ORD-B", "ORD-C")) {
        marks.add(executor.claim(DedupKey.of("listener-error", order), null, null).completeAsync());
      }
      queued.countDown();
      first.get(10, TimeUnit.SECONDS);
      CompletableFuture.allOf(marks.toArray(CompletableFuture[]::new))
          .handle((done, failure) -> null)
          .get(10, TimeUnit.SECONDS);
    } finally {
      FaultPoints.install(null);
    }

    assertThat(writes).as("writes of the outcome writer").hasValue(2);
    for (int i = 0; i < marks.size(); i++) {
      assertThat(marks.get(i)).as("mark %d's future", i).isCompletedWithValue(null);
    }
    assertThat(executor.unrecordedOutcomes()).isEmpty();
  }

  /**
   * The application's listener leaves the outcome writer's thread interrupted (it restored the flag
   * after catching an {@code InterruptedException}) as it is told of a SUCCESS, while the next mark
   * is already queued. The writer took the flag for close()'s wake-up and ended, the queued mark
   * with it: no writer came until another mark was queued, so after the last record before a quiet
   * spell its future never completed (a poll's commit waiting for it) and its key stayed
   * PROCESSING.
   */
  @Test
  void aListenerThatLeavesTheWriterInterruptedLeavesNoQueuedMarkUnwritten() throws Exception {
    CountDownLatch toldOfTheFirst = new CountDownLatch(1);
    CountDownLatch secondQueued = new CountDownLatch(1);
    DedupListener interrupting =
        new DedupListener() {
          @Override
          public void completed(DedupKey key, int attempt, Duration handlerTime) {
            if (key.bizKey().equals("ORD-0")) {
              toldOfTheFirst.countDown();
              try {
                secondQueued.await(10, TimeUnit.SECONDS);
              } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
              }
              Thread.currentThread().interrupt(); // as after catching an InterruptedException
            }
          }
        };
    IdempotentExecutor executor =
        executor(IdempotentExecutor.builder(db.store()).listener(interrupting));
    DedupKey second = DedupKey.of("listener-interrupt", "ORD-1");

    CompletableFuture<Void> first =
        executor.claim(DedupKey.of("listener-interrupt", "ORD-0"), null, null).completeAsync();
    assertThat(toldOfTheFirst.await(10, TimeUnit.SECONDS))
        .as("the listener told of the first SUCCESS")
        .isTrue();
    CompletableFuture<Void> secondMark = executor.claim(second, null, null).completeAsync();
    secondQueued.countDown();

    assertThat(first).succeedsWithin(Duration.ofSeconds(10));
    assertThat(secondMark)
        .as("the SUCCESS queued while the listener ran, no mark after it")
        .succeedsWithin(Duration.ofSeconds(10));
    assertThat(db.store().find(second).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
  }

  /**
   * The writer's write of a group of marks fails (the database out of reach) and the application's
   * listener throws an {@code Error} as it is told so: every mark of the group is still kept and
   * written in the background, and each caller hears of its own mark.
   */
  @Test
  void aListenerThatThrowsAnErrorOnAFailedWriteLeavesNoMarkOfTheGroupUnanswered() throws Exception {
    DedupListener broken =
        new DedupListener() {
          @Override
          public void storeFailed(DedupKey key, DedupStoreException error) {
            throw new AssertionError("metrics backend bug");
          }
        };
    IdempotentExecutor executor = executor(IdempotentExecutor.builder(db.store()).listener(broken));
    // The writer's first write (ORD-0 alone) waits until the next marks are queued, so that they
    // go together in the next one, which the database does not answer. They are queued only once
    // that first write has begun, as in the test above.
    CountDownLatch firstWriteBegun = new CountDownLatch(1);
    CountDownLatch queued = new CountDownLatch(1);
    AtomicInteger writes = new AtomicInteger();
    FaultPoints.install(
        point -> {
          if (point != FaultPoints.Point.BEFORE_SUCCESS_MARK
              || !Thread.currentThread().getName().equals("consumer-dedup-outcome-writer")) {
            return;
          }
          int write = writes.incrementAndGet();
          if (write == 1) {
            firstWriteBegun.countDown();
            try {
              queued.await(10, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
              Thread.currentThread().interrupt();
            }
          } else if (write == 2) {
            throw new DedupStoreUnavailableException(
                "Dedup store complete failed: connection refused", null, null, null);
          }
        });
    List<DedupKey> keys = new ArrayList<>();
    List<CompletableFuture<Void>> marks = new ArrayList<>();
    try {
      CompletableFuture<Void> first =
          executor.claim(DedupKey.of("listener-error-kept", "ORD-0"), null, null).completeAsync();
      assertThat(firstWriteBegun.await(10, TimeUnit.SECONDS)).as("the first write began").isTrue();
      for (String order : List.of("ORD-A", "ORD-B", "ORD-C")) {
        DedupKey key = DedupKey.of("listener-error-kept", order);
        keys.add(key);
        marks.add(executor.claim(key, null, null).completeAsync());
      }
      queued.countDown();
      first.get(10, TimeUnit.SECONDS);
      CompletableFuture.allOf(marks.toArray(CompletableFuture[]::new))
          .handle((done, failure) -> null)
          .get(10, TimeUnit.SECONDS);
    } finally {
      FaultPoints.install(null);
    }

    assertThat(writes).as("writes of the outcome writer").hasValue(2);
    for (int i = 0; i < marks.size(); i++) {
      assertThat(marks.get(i))
          .as("mark %d's future", i)
          .failsWithin(Duration.ZERO)
          .withThrowableOfType(ExecutionException.class)
          .withCauseInstanceOf(DedupStoreUnavailableException.class);
    }
    await()
        .atMost(Duration.ofSeconds(10))
        .untilAsserted(
            () -> {
              for (DedupKey key : keys) {
                assertThat(db.store().find(key).orElseThrow().status())
                    .as("%s, written in the background", key)
                    .isEqualTo(DedupStatus.SUCCESS);
              }
            });
    await()
        .atMost(Duration.ofSeconds(10))
        .untilAsserted(() -> assertThat(executor.unrecordedOutcomes()).isEmpty());
  }

  /**
   * An {@code Error} (an {@code OutOfMemoryError}) on the writer thread after it took a mark from
   * its queue and before it began to write it: the mark is kept and written in the background, its
   * caller told so, and the next marks are written as before.
   */
  @Test
  void aMarkTheWriterTookWhenAnErrorStruckIsWrittenNotLeftUnanswered() throws Exception {
    aMarkTheWriterTookWhenStruckIsWrittenNotLeftUnanswered(
        "writer-error", () -> new OutOfMemoryError("Java heap space (injected)"));
  }

  /**
   * As above, with a failure that cannot describe itself (its {@code getMessage()} and {@code
   * toString()} throw, as an exception of a closed persistence session does): its description must
   * not end the writer with the marks it took.
   */
  @Test
  void aMarkTheWriterTookWhenAnUnprintableFailureStruckIsWrittenNotLeftUnanswered()
      throws Exception {
    aMarkTheWriterTookWhenStruckIsWrittenNotLeftUnanswered(
        "writer-unprintable",
        () ->
            new IllegalStateException() {
              private static final long serialVersionUID = 1L;

              @Override
              public String getMessage() {
                throw new IllegalStateException("the pool's session is closed");
              }

              @Override
              public String toString() {
                throw new IllegalStateException("the pool's session is closed");
              }
            });
  }

  private void aMarkTheWriterTookWhenStruckIsWrittenNotLeftUnanswered(
      String bizType, Supplier<Throwable> strike) throws Exception {
    IdempotentExecutor executor = executor();
    DedupKey struck = DedupKey.of(bizType, "ORD-1");
    DedupKey next = DedupKey.of(bizType, "ORD-2");
    AtomicInteger taken = new AtomicInteger();
    FaultPoints.install(
        point -> {
          if (point == FaultPoints.Point.SUCCESS_MARKS_TAKEN && taken.incrementAndGet() == 1) {
            Throwable thrown = strike.get();
            if (thrown instanceof Error error) {
              throw error;
            }
            throw (RuntimeException) thrown;
          }
        });
    try {
      CompletableFuture<Void> struckMark =
          executor.claim(struck, null, "orders-0@1").completeAsync();
      assertThat(struckMark)
          .as("the struck mark's future")
          .failsWithin(Duration.ofSeconds(10))
          .withThrowableOfType(ExecutionException.class)
          .withCauseInstanceOf(DedupStoreUnavailableException.class);
    } finally {
      FaultPoints.install(null);
    }

    assertThat(executor.claim(next, null, "orders-0@2").completeAsync())
        .as("the next mark's future")
        .succeedsWithin(Duration.ofSeconds(10));
    await()
        .atMost(Duration.ofSeconds(10))
        .untilAsserted(
            () ->
                assertThat(db.store().find(struck).orElseThrow().status())
                    .as("the struck mark, written in the background")
                    .isEqualTo(DedupStatus.SUCCESS));
    assertThat(executor.unrecordedOutcomes()).isEmpty();
  }

  /**
   * As below, with a write that outlasts close()'s wait for the writer (a second, by default): the
   * close gave up the marks of that write while it was on its way, their futures failed with {@link
   * DedupExecutorClosedException} and each logged at ERROR as "not recorded", though the write then
   * recorded them; a caller that waits for the mark before committing its record's offset (a poll's
   * commit) held the record back for nothing. The writer settles the marks of its write itself,
   * written or given up.
   */
  @Test
  void aMarkBeingWrittenWhenTheExecutorClosesIsSettledByItsWriteNotGivenUp() throws Exception {
    IdempotentExecutor executor = executor();
    DedupKey key = DedupKey.of("closing-slow-write", "ORD-1");
    CountDownLatch writing = new CountDownLatch(1);
    FaultPoints.install(
        point -> {
          if (point == FaultPoints.Point.BEFORE_SUCCESS_MARK
              && Thread.currentThread().getName().equals("consumer-dedup-outcome-writer")) {
            writing.countDown();
            try {
              Thread.sleep(2_000); // a database slow to take the write, within its timeouts
            } catch (InterruptedException e) {
              Thread.currentThread().interrupt();
            }
          }
        });
    CompletableFuture<Void> written;
    try {
      written = executor.claim(key, null, "orders-0@1").completeAsync();
      assertThat(writing.await(10, TimeUnit.SECONDS)).as("the write under way").isTrue();
      executor.close();
    } finally {
      FaultPoints.install(null);
    }

    assertThat(written)
        .as("[what a poll's commit waits for] the mark written while the executor closed")
        .succeedsWithin(Duration.ofSeconds(10));
    assertThat(db.store().find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
  }

  @Test
  void aMarkTheWriterTookAsTheExecutorClosesIsWrittenNotGivenUp() throws Exception {
    // One connection, lent to another thread (a handler, say) as the executor closes: the writer
    // waits for it, as any writer waits for a busy pool, and must not be cut short by the close.
    try (HikariDataSource pool = TestDatabase.dataSource(db.schema(), 1)) {
      JdbcDedupStore store = JdbcDedupStore.builder(pool).build();
      for (int round = 0; round < 5; round++) {
        IdempotentExecutor executor = IdempotentExecutor.builder(store).build();
        // A first mark starts the writer thread, which then waits for the next one.
        executor
            .claim(DedupKey.of("closing-writer", "warm-" + round), null, null)
            .completeAsync()
            .get(10, TimeUnit.SECONDS);
        DedupKey key = DedupKey.of("closing-writer", "ORD-" + round);
        DedupClaim claim = executor.claim(key, null, "orders-0@" + round);
        Connection busy = pool.getConnection();
        CompletableFuture<Void> handedBack =
            CompletableFuture.runAsync(
                () -> {
                  try {
                    Thread.sleep(300);
                    busy.close();
                  } catch (InterruptedException | SQLException e) {
                    throw new IllegalStateException(e);
                  }
                });

        CompletableFuture<Void> written = claim.completeAsync();
        executor.close();
        handedBack.get(10, TimeUnit.SECONDS);

        assertThat(written)
            .as("round %d: the mark's future", round)
            .succeedsWithin(Duration.ofSeconds(10));
        assertThat(store.find(key).orElseThrow().status())
            .as("round %d: the key's record", round)
            .isEqualTo(DedupStatus.SUCCESS);
      }
    }
  }

  @Test
  void hostileKeysAreStoredVerbatimOrHashedAndTheTableSurvives() throws SQLException {
    IdempotentExecutor executor = executor();
    List<String> hostile =
        List.of(
            "'; DROP TABLE consumer_dedup; --",
            "Robert'); DELETE FROM consumer_dedup WHERE ('1'='1",
            "quote\"double\"and'single'",
            "back\\slash\\\\ and %_ like wildcards",
            "emoji \uD83D\uDCB8\uD83D\uDD25 and \u4E2D\u6587 and \u0645\u0631\u062D\u0628\u0627",
            "x".repeat(10_000));
    AtomicInteger runs = new AtomicInteger();

    for (String text : hostile) {
      DedupKey key = DedupKey.of("hostile", text);
      assertThat(executor.execute(key, runs::incrementAndGet).outcome())
          .isEqualTo(Outcome.PROCESSED);
      assertThat(executor.execute(key, runs::incrementAndGet).outcome())
          .isEqualTo(Outcome.DUPLICATE);
      DedupRecord record = db.store().find(key).orElseThrow();
      if (text.length() > DedupKey.MAX_BIZ_KEY_LENGTH) {
        assertThat(record.key().bizKey()).startsWith("sha256:");
      } else {
        assertThat(record.key().bizKey()).isEqualTo(text);
      }
    }

    assertThat(runs).hasValue(hostile.size());
    try (Connection connection = db.dataSource().getConnection();
        Statement statement = connection.createStatement();
        var row =
            statement.executeQuery(
                "SELECT count(*) FROM consumer_dedup WHERE biz_type = 'hostile'")) {
      row.next();
      assertThat(row.getInt(1)).isEqualTo(hostile.size());
    }
  }

  @Test
  void aFingerprintLongerThanTheColumnIsRefusedBeforeAnythingIsWritten() {
    DedupKey key = DedupKey.of("payment", "ORD-13");
    assertThatThrownBy(() -> executor().execute(key, "f".repeat(65), () -> 1))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("fingerprint must be 1 to 64 characters, was 65");
    assertThat(db.store().find(key)).isEmpty();
  }

  static void execute(javax.sql.DataSource target, String sql) throws SQLException {
    try (Connection connection = target.getConnection();
        Statement statement = connection.createStatement()) {
      statement.execute(sql);
    }
  }

  /** A handler running on another thread, blocked inside until {@link #finish()}. */
  private static final class BlockedRun {
    private final CountDownLatch release = new CountDownLatch(1);
    private final CompletableFuture<DedupResult<Object>> result;

    BlockedRun(IdempotentExecutor executor, DedupKey key) throws InterruptedException {
      this(executor, key, null);
    }

    BlockedRun(IdempotentExecutor executor, DedupKey key, String fingerprint)
        throws InterruptedException {
      CountDownLatch running = new CountDownLatch(1);
      result =
          CompletableFuture.supplyAsync(
              () ->
                  executor.execute(
                      key,
                      fingerprint,
                      () -> {
                        running.countDown();
                        release.await(30, TimeUnit.SECONDS);
                        return null;
                      }));
      assertThat(running.await(10, TimeUnit.SECONDS)).as("the handler started").isTrue();
    }

    DedupResult<Object> finish() throws Exception {
      release.countDown();
      return result.get(10, TimeUnit.SECONDS);
    }
  }

  /**
   * PostgreSQL's text refuses NUL: an owner id with one was taken by the builder (and by the
   * in-memory store of a user's tests), then every claim failed as the store refusing its data,
   * which dead-letters each record unapplied.
   */
  @Test
  void anOwnerIdTheTableCannotHoldIsRefusedWhenGivenNotAtEveryClaim() {
    String withNul = "billing\u0000-1";
    assertThatThrownBy(
            () ->
                db.store()
                    .claim(
                        new ClaimRequest(
                            DedupKey.of("payment", "owner-nul"),
                            withNul,
                            Duration.ofMinutes(1),
                            Duration.ofDays(1),
                            null,
                            null)))
        .as("the table refuses the owner id")
        .isInstanceOf(DedupStoreDataException.class);

    assertThatThrownBy(() -> IdempotentExecutor.builder(db.store()).ownerId(withNul))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("with no control characters");
  }
}
