package io.consumerdedup.faults;

import static org.assertj.core.api.Assertions.assertThat;

import java.time.Duration;
import org.junit.jupiter.api.Test;

/**
 * The faults of the other classes through a Spring Boot {@code @Idempotent @KafkaListener} on the
 * auto-configured defaults ({@link SpringFaultConsumer}), with the same invariants: a record
 * listener in mode SEPARATE unless a test says otherwise. Where records must end on a dead-letter
 * topic (F10-F13, bad input) the application has the error handler docs/spring-boot.md shows; F14
 * and F15 are about the store's clock and concurrency, which no listener changes, and run on the
 * plain consumer only.
 */
class SpringFaultsTest {
  private static final Target SPRING = Target.SPRING;
  private static final int RECORDS = 60;

  @Test
  void f1KillAfterTheListenersEffectReRunsExactlyThatRecord() throws Exception {
    FaultRun.Verdict verdict =
        CrashFaultsTest.crashes(
            SPRING, "F1 kill after handler", "SEPARATE", false, "AFTER_HANDLER", 1, RECORDS);
    // The listener's effect was applied and its SUCCESS never written: that record, no other.
    assertThat(verdict.window()).isEqualTo(1);
    assertThat(verdict.duplicates()).isEqualTo(1);
  }

  @Test
  void f2KillAfterSuccessBeforeTheOffsetCommitReAppliesNothing() throws Exception {
    FaultRun.Verdict verdict =
        CrashFaultsTest.crashes(
            SPRING, "F2 kill after SUCCESS", "SEPARATE", false, "AFTER_SUCCESS_MARK", 1, RECORDS);
    assertThat(verdict.duplicates()).isZero();
  }

  @Test
  void f3KillAfterTheClaimIsTakenOverOnceTheLeaseRunsOut() throws Exception {
    FaultRun.Verdict verdict =
        CrashFaultsTest.crashes(
            SPRING, "F3 kill after claim", "SEPARATE", false, "AFTER_CLAIM", 1, RECORDS);
    assertThat(verdict.duplicates()).isZero();
  }

  @Test
  void f4f18AZombieListenerLosesItsLeaseAndItsLateSuccessIsRefused() throws Exception {
    DatabaseFaultsTest.zombie(SPRING, 40);
  }

  @Test
  void f5BouncesRollingAndAllAtOnce() throws Exception {
    GroupFaultsTest.bounces(SPRING, 150);
  }

  @Test
  void f6f7RepliesOfClaimsAndMarksLostAfterTheCommitAndConnectionsCut() throws Exception {
    DatabaseFaultsTest.repliesLostAndConnectionsCut(SPRING, RECORDS, Duration.ofSeconds(4));
  }

  @Test
  void f8DatabaseUnreachableForSecondsHoldsRecordsAndAppliesThemOnceAfterwards() throws Exception {
    DatabaseFaultsTest.databaseUnreachable(SPRING, false, 100, 5_000);
  }

  @Test
  void f9TwoHundredMillisecondsMoreOnEveryRoundTrip() throws Exception {
    DatabaseFaultsTest.latency(SPRING, 30);
  }

  @Test
  void f10f11PoisonAndTransientFailuresWhileThePartitionsMove() throws Exception {
    InputFaultsTest.poisonAndTransientFailures(SPRING);
  }

  @Test
  void f12f13AnotherPayloadIsAConflictAndAKeyTwiceInARowIsADuplicate() throws Exception {
    InputFaultsTest.conflictsAndDuplicates(SPRING);
  }

  @Test
  void f16KillInTheMiddleOfAPollTransactionalListener() throws Exception {
    FaultRun.Verdict verdict =
        CrashFaultsTest.crashes(
            SPRING, "F16 kill mid-batch", "TRANSACTIONAL", false, "AFTER_HANDLER", 1, RECORDS);
    assertThat(verdict.kills()).isEqualTo(1);
    assertThat(verdict.duplicates()).isZero();
  }

  @Test
  void f16KillInTheMiddleOfABatchListenersBatch() throws Exception {
    FaultRun.Verdict verdict =
        CrashFaultsTest.crashes(
            SPRING, "F16 kill mid-batch", "SEPARATE", true, "AFTER_HANDLER", 1, RECORDS);
    // The batch's effects before the kill have no SUCCESS yet (marks are written when the batch
    // returns): each is re-run once, and no more than those.
    assertThat(verdict.kills()).isEqualTo(1);
    assertThat(verdict.duplicates()).isEqualTo(verdict.window());
  }

  @Test
  void badInputEndsProcessedOnceOrDeadLetteredWithTheReason() throws Exception {
    InputFaultsTest.badInput(SPRING);
  }
}
