package io.consumerdedup.faults;

import static org.assertj.core.api.Assertions.assertThat;

import java.time.Duration;
import org.junit.jupiter.api.Test;

/**
 * The scenarios of the plain consumer again, against MariaDB (the MySQL dialect of the store, its
 * table from the MySQL schema file, the proxy in front of the MariaDB server), with fewer records
 * than on PostgreSQL: every fault from F1 to F16, F21 to F23 and the bad input. Not the soak (its
 * faults are these, drawn at random; once, on PostgreSQL, keeps the suite's length) and not the
 * Spring Boot listener (the listener adapts to the store, not to its dialect). Skipped with a
 * message when {@code DEDUP_TEST_MARIADB_URL} is not set and no local server answers; failed when
 * it is set and the server does not answer.
 */
class MariaDbFaultsTest {
  private static final int RECORDS = 40;

  @Test
  void f1KillAfterTheHandlerPerRecordReRunsExactlyTheRecordInTheWindow() throws Exception {
    FaultRun.Verdict verdict =
        CrashFaultsTest.crashes(
            Target.MARIADB,
            "F1 kill after handler",
            "SEPARATE",
            false,
            "AFTER_HANDLER",
            1,
            RECORDS);
    assertThat(verdict.window()).isEqualTo(1);
    assertThat(verdict.duplicates()).isEqualTo(1);
  }

  @Test
  void f2KillAfterSuccessBeforeTheOffsetCommitReAppliesNothing() throws Exception {
    FaultRun.Verdict verdict =
        CrashFaultsTest.crashes(
            Target.MARIADB,
            "F2 kill after SUCCESS",
            "SEPARATE",
            false,
            "AFTER_SUCCESS_MARK",
            1,
            RECORDS);
    assertThat(verdict.duplicates()).isZero();
  }

  @Test
  void f3KillAfterTheClaimIsTakenOverOnceTheLeaseRunsOut() throws Exception {
    FaultRun.Verdict verdict =
        CrashFaultsTest.crashes(
            Target.MARIADB, "F3 kill after claim", "SEPARATE", false, "AFTER_CLAIM", 1, RECORDS);
    assertThat(verdict.duplicates()).isZero();
  }

  @Test
  void f5BouncesRollingAndAllAtOnce() throws Exception {
    GroupFaultsTest.bounces(Target.MARIADB, 150);
  }

  @Test
  void f6f7RepliesOfClaimsAndMarksLostAfterTheCommitAndConnectionsCut() throws Exception {
    DatabaseFaultsTest.repliesLostAndConnectionsCut(Target.MARIADB, 60, Duration.ofSeconds(4));
  }

  @Test
  void f8DatabaseUnreachableForSecondsHoldsRecordsAndAppliesThemOnceAfterwards() throws Exception {
    DatabaseFaultsTest.databaseUnreachable(Target.MARIADB, true, 60, 1_000);
  }

  @Test
  void f4f18AZombieWhoseConnectionStallsLosesItsLeaseAndItsLateMarkIsRefused() throws Exception {
    DatabaseFaultsTest.zombie(Target.MARIADB, RECORDS);
  }

  @Test
  void f9TwoHundredMillisecondsMoreOnEveryRoundTrip() throws Exception {
    DatabaseFaultsTest.latency(Target.MARIADB, 30);
  }

  @Test
  void f10f11PoisonAndTransientFailuresWhileThePartitionsMove() throws Exception {
    InputFaultsTest.poisonAndTransientFailures(Target.MARIADB);
  }

  @Test
  void f12f13AnotherPayloadIsAConflictAndAKeyTwiceInOneBatchIsADuplicate() throws Exception {
    InputFaultsTest.conflictsAndDuplicates(Target.MARIADB);
  }

  @Test
  void f14AClockTenMinutesOffNeitherTakesOverEarlyNorHoldsALeaseForever() throws Exception {
    ClockSkewFaultsTest.clockSkew(Target.MARIADB);
  }

  @Test
  void f15ManyThreadsClaimingOneKeyRoundAfterRound() throws Exception {
    GroupFaultsTest.manyThreadsOneKey(Target.MARIADB, 200);
  }

  @Test
  void badInputEndsProcessedOnceOrDeadLetteredWithTheReason() throws Exception {
    InputFaultsTest.badInput(Target.MARIADB);
  }

  @Test
  void f21TwoLoopsSharingAnExecutorAfterUnansweredClaimsApplyEachKeyOnce() throws Exception {
    ClaimFaultsTest.twoLoopsAfterUnansweredClaims(Target.MARIADB, 10);
  }

  @Test
  void f22AClaimTakenUpNearTheEndOfItsLeaseHoldsTheKeyThroughASlowHandler() throws Exception {
    ClaimFaultsTest.claimTakenUpNearLeaseEnd(Target.MARIADB);
  }

  @Test
  void f23AReleaseOfALiveHolderIsRefusedAndTheKeyIsAppliedOnce() throws Exception {
    ClaimFaultsTest.releaseOfALiveHolder(Target.MARIADB);
  }

  @Test
  void f16KillInTheMiddleOfABatchTransactionalPerPoll() throws Exception {
    FaultRun.Verdict verdict =
        CrashFaultsTest.crashes(
            Target.MARIADB,
            "F16 kill mid-batch",
            "TRANSACTIONAL",
            true,
            "AFTER_HANDLER",
            1,
            RECORDS);
    assertThat(verdict.kills()).isEqualTo(1);
    assertThat(verdict.duplicates()).isZero();
  }
}
