package io.consumerdedup.faults;

import static org.assertj.core.api.Assertions.assertThat;

import java.time.Duration;
import org.junit.jupiter.api.Test;

/**
 * The most telling scenarios again, against MariaDB (the MySQL dialect of the store, its table from
 * the MySQL schema file, the proxy in front of the MariaDB server): a kill after the handler (F1)
 * and after the claim (F3), replies of claims and marks lost after the server committed (F6/F7),
 * the database unreachable for seconds (F8), and a kill in the middle of a batch in mode
 * TRANSACTIONAL (F16). Fewer records than on PostgreSQL, so the suite's length grows by a minute at
 * most. Skipped with a message when {@code DEDUP_TEST_MARIADB_URL} is not set and no local server
 * answers; failed when it is set and the server does not answer.
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
  void f3KillAfterTheClaimIsTakenOverOnceTheLeaseRunsOut() throws Exception {
    FaultRun.Verdict verdict =
        CrashFaultsTest.crashes(
            Target.MARIADB, "F3 kill after claim", "SEPARATE", false, "AFTER_CLAIM", 1, RECORDS);
    assertThat(verdict.duplicates()).isZero();
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
  void badInputEndsProcessedOnceOrDeadLetteredWithTheReason() throws Exception {
    InputFaultsTest.badInput(Target.MARIADB);
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
