package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupLeaseLostException;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.core.internal.LeaseRenewer;
import io.consumerdedup.testing.InterceptedStore;
import java.time.Duration;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * An operator force-releases a key whose handler still runs ({@code DedupAdmin.release(key, who,
 * true)}): the key is FAILED with the operator's note and nobody holds it. The holder must be told
 * that, not that "another consumer" took the key over and "the new holder decides"; its late FAILED
 * must not overwrite the note; and its renewal must settle the loss even when reading the record
 * throws an {@code Error}.
 */
class ForcedReleaseHolderTest {
  private static final String OPERATOR = "ops-on-call";

  @RegisterExtension static final TwoDatabases databases = new TwoDatabases("forced_release");

  @RegisterExtension
  final CapturedWarnings logs =
      new CapturedWarnings(
          LeaseRenewer.class.getName(), "io.consumerdedup.core.internal.PendingOutcomes");

  private static DedupKey newKey() {
    return DedupKey.of("released", UUID.randomUUID().toString());
  }

  /** Renewals far apart: a holder's outcome, not a renewal, is the first to find a release. */
  private static IdempotentExecutor renewingRarely(JdbcDedupStore store) {
    return IdempotentExecutor.builder(store)
        .lease(Duration.ofMinutes(5))
        .renewalInterval(Duration.ofMinutes(2))
        .build();
  }

  private static void forceRelease(JdbcDedupStore store, DedupKey key) {
    assertThat(JdbcDedupAdmin.of(store).release(key, OPERATOR, true).applied())
        .as("the operator's forced release")
        .isTrue();
  }

  @ParameterizedTest
  @ValueSource(strings = {"postgres", "mariadb"})
  void aHolderWhoseKeyAnOperatorReleasedIsToldSoNotThatAnotherConsumerHoldsIt(String database)
      throws Exception {
    JdbcDedupStore store = JdbcDedupStore.builder(databases.dataSource(database)).build();
    try (IdempotentExecutor executor =
        IdempotentExecutor.builder(store)
            .lease(Duration.ofSeconds(30))
            .renewalInterval(Duration.ofMillis(100))
            .build()) {
      DedupKey key = newKey();
      DedupClaim claim = executor.claim(key, null, "orders-0@3");
      forceRelease(store, key);
      for (int i = 0; i < 50 && logs.all().isEmpty(); i++) {
        Thread.sleep(100);
      }

      Throwable lateSuccess = catchThrowable(claim::complete);

      // One from the refused renewal, one from the refused SUCCESS.
      assertThat(logs.all())
          .as("the holder's warnings once its renewal was refused")
          .isNotEmpty()
          .allSatisfy(
              warning ->
                  assertThat(warning)
                      .contains("released by an operator")
                      .contains("Released by " + OPERATOR)
                      .doesNotContain("another consumer"));
      assertThat(lateSuccess)
          .as("the holder's late SUCCESS")
          .isInstanceOf(DedupLeaseLostException.class)
          .hasMessageContaining("released by an operator")
          .hasMessageContaining("Released by " + OPERATOR)
          .hasMessageNotContaining("new holder");
    }
  }

  @ParameterizedTest
  @ValueSource(strings = {"postgres", "mariadb"})
  void aReleasedHoldersLateSuccessIsToldSoWithTheOperatorsNote(String database) {
    JdbcDedupStore store = JdbcDedupStore.builder(databases.dataSource(database)).build();
    try (IdempotentExecutor executor = renewingRarely(store)) {
      DedupKey key = newKey();
      DedupClaim claim = executor.claim(key, null, "orders-0@4");
      forceRelease(store, key);

      Throwable lateSuccess = catchThrowable(claim::complete);

      assertThat(lateSuccess)
          .as("the holder's late SUCCESS")
          .isInstanceOf(DedupLeaseLostException.class)
          .hasMessageContaining("released by an operator")
          .hasMessageContaining("Released by " + OPERATOR);
      assertThat(((DedupLeaseLostException) lateSuccess).releaseNote())
          .hasValueSatisfying(note -> assertThat(note).startsWith("Released by " + OPERATOR));
      assertThat(logs.all())
          .singleElement()
          .asString()
          .contains("released by an operator")
          .doesNotContain("another consumer");
      // The key stays released: FAILED under the holder's attempt, so the next delivery runs the
      // handler again (the risk the forced release names).
      DedupRecord record = store.find(key).orElseThrow();
      assertThat(record.status()).isEqualTo(DedupStatus.FAILED);
      AtomicInteger runs = new AtomicInteger();
      assertThat(executor.execute(key, runs::incrementAndGet).outcome())
          .isEqualTo(Outcome.PROCESSED);
      assertThat(runs).hasValue(1);
    }
  }

  @ParameterizedTest
  @ValueSource(strings = {"postgres", "mariadb"})
  void aReleasedHoldersLateFailureKeepsTheOperatorsNote(String database) {
    JdbcDedupStore store = JdbcDedupStore.builder(databases.dataSource(database)).build();
    try (IdempotentExecutor executor = renewingRarely(store)) {
      DedupKey key = newKey();
      DedupClaim claim = executor.claim(key, null, "orders-0@5");
      forceRelease(store, key);

      claim.fail(new IllegalStateException("the released handler failed late"));

      DedupRecord record = store.find(key).orElseThrow();
      assertThat(record.status()).isEqualTo(DedupStatus.FAILED);
      assertThat(record.lastError())
          .as("the note of the key's record after the released holder's late FAILED")
          .hasValueSatisfying(note -> assertThat(note).startsWith("Released by " + OPERATOR));
      // An ordinary failure still writes its error, and its retry (the same FAILED) too.
      DedupKey other = newKey();
      DedupClaim failing = executor.claim(other, null, "orders-0@6");
      failing.fail(new IllegalStateException("an ordinary failure"));
      assertThat(store.find(other).orElseThrow().lastError())
          .hasValueSatisfying(note -> assertThat(note).contains("an ordinary failure"));
    }
  }

  /**
   * The renewal refused asks the store what holds the key; an {@code Error} there (an {@code
   * OutOfMemoryError} as the row is read) ended that tick's answer before the key was marked lost,
   * so nobody heard of the loss until a later tick got through.
   */
  @Test
  void aRefusedRenewalWhoseReadOfTheRecordThrowsAnErrorStillReportsTheLoss() throws Exception {
    JdbcDedupStore jdbc = JdbcDedupStore.builder(databases.postgres()).build();
    AtomicInteger finds = new AtomicInteger();
    DedupStore store =
        InterceptedStore.before(
            jdbc,
            (method, args) -> {
              if (method.getName().equals("find")) {
                finds.incrementAndGet();
                throw new OutOfMemoryError("Java heap space (injected as the row is read)");
              }
            });
    List<Integer> lost = new CopyOnWriteArrayList<>();
    DedupListener listener =
        new DedupListener() {
          @Override
          public void leaseLost(DedupKey key, int attempt) {
            lost.add(attempt);
          }
        };
    try (IdempotentExecutor executor =
        IdempotentExecutor.builder(store)
            .lease(Duration.ofSeconds(30))
            .renewalInterval(Duration.ofMillis(100))
            .listener(listener)
            .build()) {
      DedupKey key = newKey();
      DedupClaim claim = executor.claim(key, null, "orders-0@7");
      forceRelease(jdbc, key);
      for (int i = 0; i < 20 && lost.isEmpty(); i++) {
        Thread.sleep(100);
      }

      assertThat(finds.get()).as("reads of the record by refused renewals").isPositive();
      assertThat(lost)
          .as("losses heard by the listener, %s refused renewals later", finds.get())
          .containsExactly(claim.attempt());
      assertThat(claim.isLeaseLost()).as("the holder knows its lease is gone").isTrue();
    }
  }
}
