package io.consumerdedup.faults;

import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.api.Test;

/**
 * The crashes and the database outage of {@link CrashFaultsTest} and {@link DatabaseFaultsTest}
 * through a Spring Boot {@code @Idempotent @KafkaListener} on the auto-configured defaults ({@link
 * SpringFaultConsumer}, one record per listener call, mode SEPARATE), with the same invariants.
 */
class SpringFaultsTest {

  @Test
  void f1KillAfterTheListenersEffectReRunsExactlyThatRecord() throws Exception {
    FaultRun.Verdict verdict =
        CrashFaultsTest.crashes(
            "F1 kill after handler, Spring",
            "SEPARATE",
            false,
            "AFTER_HANDLER",
            1,
            SpringFaultConsumer.class);
    // The listener's effect was applied and its SUCCESS never written: that record, no other.
    assertThat(verdict.window()).isEqualTo(1);
    assertThat(verdict.duplicates()).isEqualTo(1);
  }

  @Test
  void f2KillAfterSuccessBeforeTheOffsetCommitReAppliesNothing() throws Exception {
    FaultRun.Verdict verdict =
        CrashFaultsTest.crashes(
            "F2 kill after SUCCESS, Spring",
            "SEPARATE",
            false,
            "AFTER_SUCCESS_MARK",
            1,
            SpringFaultConsumer.class);
    assertThat(verdict.duplicates()).isZero();
  }

  @Test
  void f3KillAfterTheClaimIsTakenOverOnceTheLeaseRunsOut() throws Exception {
    FaultRun.Verdict verdict =
        CrashFaultsTest.crashes(
            "F3 kill after claim, Spring",
            "SEPARATE",
            false,
            "AFTER_CLAIM",
            1,
            SpringFaultConsumer.class);
    assertThat(verdict.duplicates()).isZero();
  }

  @Test
  void f8DatabaseUnreachableForSecondsHoldsRecordsAndAppliesThemOnceAfterwards() throws Exception {
    DatabaseFaultsTest.databaseUnreachable(
        FaultDatabase.POSTGRES,
        "F8 database unreachable, Spring",
        false,
        SpringFaultConsumer.class);
  }
}
