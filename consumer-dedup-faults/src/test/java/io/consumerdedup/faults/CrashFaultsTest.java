package io.consumerdedup.faults;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.testing.ChildJvm;
import java.time.Duration;
import java.util.Random;
import org.junit.jupiter.api.Test;

/**
 * Consumers crash (the JVM halts, as a SIGKILL would leave it) at the points where a guarantee is
 * decided: F1 after the handler, F2 after SUCCESS and before the offset commit, F3 after the claim,
 * F16 in the middle of a batch, F29 while SUCCESS marks written in the background are on their way
 * (their handlers ran, the loop went on), per record and batched, in modes SEPARATE and
 * TRANSACTIONAL. After each crash a consumer starts in the dead one's place; the last one finishes
 * the topic.
 */
class CrashFaultsTest {
  static final Duration LEASE = Duration.ofSeconds(2);
  static final Duration CRASH_TIMEOUT = Duration.ofSeconds(60);
  static final Duration FINISH_TIMEOUT = Duration.ofSeconds(60);
  static final int RECORDS = 80;

  /**
   * Runs {@code kills} consumers that each halt at the {@code n}-th arrival at {@code point} (n
   * drawn from the seed), then one that finishes; returns the verdict.
   */
  static FaultRun.Verdict crashes(
      String name, String mode, boolean batched, String point, int kills) throws Exception {
    return crashes(Target.PLAIN, name, mode, batched, point, kills, RECORDS);
  }

  /** As {@link #crashes(String, String, boolean, String, int)}, on {@code target}. */
  static FaultRun.Verdict crashes(
      Target target,
      String name,
      String mode,
      boolean batched,
      String point,
      int kills,
      int records)
      throws Exception {
    return crashes(target, name, mode, batched, point, kills, records, run -> {});
  }

  /** As above, the run first prepared by {@code setUp} (consumer arguments). */
  static FaultRun.Verdict crashes(
      Target target,
      String name,
      String mode,
      boolean batched,
      String point,
      int kills,
      int records,
      Reliability.Body setUp)
      throws Exception {
    return Reliability.scenario(
        target,
        name,
        mode,
        batched,
        LEASE,
        run -> {
          setUp.run(run);
          Random random = Reliability.random(run.name);
          run.produce(records, "order-");
          run.watchOffsets();
          for (int i = 0; i < kills; i++) {
            int nth =
                point.equals("BEFORE_OFFSET_COMMIT")
                        || (batched && point.equals("BEFORE_SUCCESS_MARK"))
                    ? 1 + random.nextInt(2) // a few per poll, not one per record
                    : 3 + random.nextInt(batched ? 30 : 15);
            ChildJvm consumer = run.start("a", point + ":halt:" + nth);
            run.awaitCrash(consumer, CRASH_TIMEOUT);
            run.notes.add("halted at " + point + " #" + nth);
          }
          run.start("a", null);
          run.awaitDone(FINISH_TIMEOUT);
          if (run.transactional()) {
            // The claim was in the killed consumer's transaction, so it went with it: no key needed
            // taking over. A claim committed on its own (mode SEPARATE) would have.
            long takenOver =
                run.queryLong("SELECT count(*) FROM consumer_dedup WHERE attempts > 1");
            run.notes.add("claims rolled back with the effects: " + (takenOver == 0));
            if (takenOver > 0) {
              run.violation(takenOver + " key(s) taken over: a claim outlived its transaction");
            }
          }
          if (point.equals("AFTER_CLAIM")) {
            // Each killed consumer's claimed key was taken over by the next once its lease ran out.
            long takenOver =
                run.queryLong("SELECT count(*) FROM consumer_dedup WHERE attempts > 1");
            run.notes.add(takenOver + " key(s) taken over after the lease");
            if (takenOver < kills) {
              run.violation("F3: " + takenOver + " key(s) taken over after " + kills + " kill(s)");
            }
          }
        });
  }

  @Test
  void f1KillAfterTheHandlerPerRecordReRunsExactlyTheRecordInTheWindow() throws Exception {
    FaultRun.Verdict verdict =
        crashes("F1 kill after handler", "SEPARATE", false, "AFTER_HANDLER", 2);
    // Per record, each kill after the handler leaves exactly that record applied without SUCCESS.
    assertThat(verdict.window()).isEqualTo(2);
    assertThat(verdict.duplicates()).isEqualTo(2);
  }

  @Test
  void f1KillAfterTheHandlerBatched() throws Exception {
    FaultRun.Verdict verdict =
        crashes("F1 kill after handler", "SEPARATE", true, "AFTER_HANDLER", 2);
    assertThat(verdict.window()).isGreaterThanOrEqualTo(2);
  }

  @Test
  void f2KillAfterSuccessBeforeTheOffsetCommitReAppliesNothing() throws Exception {
    FaultRun.Verdict verdict =
        crashes("F2 kill after SUCCESS", "SEPARATE", false, "AFTER_SUCCESS_MARK", 1);
    assertThat(verdict.duplicates()).isZero();
  }

  @Test
  void f2KillBeforeTheOffsetCommitBatched() throws Exception {
    FaultRun.Verdict verdict =
        crashes("F2 kill before offset commit", "SEPARATE", true, "BEFORE_OFFSET_COMMIT", 1);
    assertThat(verdict.duplicates()).isZero();
  }

  @Test
  void f27KillBeforeTheSuccessThatRidesWithTheNextClaimReRunsOnlyTheRecordInHand()
      throws Exception {
    FaultRun.Verdict verdict =
        crashes("F29 kill before marks are written", "SEPARATE", false, "BEFORE_SUCCESS_MARK", 2);
    // Per record the previous record's SUCCESS is written with the next claim, before the next
    // handler runs: a kill before that claim leaves the one record whose handler just ran.
    assertThat(verdict.window()).isEqualTo(2);
    assertThat(verdict.duplicates()).isEqualTo(2);
  }

  @Test
  void f27KillBeforeAGroupOfMarksIsWrittenReRunsAtMostTheRecordsOfThatPoll() throws Exception {
    FaultRun.Verdict verdict =
        crashes("F29 kill before marks are written", "SEPARATE", true, "BEFORE_SUCCESS_MARK", 2);
    // The loop waits for a poll's marks before the next poll's first handler runs, so a kill
    // leaves at most one poll's records (max.poll.records: 50) applied without SUCCESS; the
    // group being written holds at least one. Once they are written, nothing runs again (F2).
    assertThat(verdict.window()).isBetween(2, 2 * 50);
    assertThat(verdict.duplicates()).isEqualTo(verdict.window());
  }

  @Test
  void f3KillAfterTheClaimIsTakenOverOnceTheLeaseRunsOut() throws Exception {
    FaultRun.Verdict verdict = crashes("F3 kill after claim", "SEPARATE", false, "AFTER_CLAIM", 1);
    assertThat(verdict.duplicates()).isZero();
  }

  @Test
  void f16KillInTheMiddleOfABatchTransactionalPerRecord() throws Exception {
    crashes("F16 kill mid-batch", "TRANSACTIONAL", false, "AFTER_HANDLER", 1);
  }

  @Test
  void f16KillInTheMiddleOfABatchTransactionalPerPoll() throws Exception {
    crashes("F16 kill mid-batch", "TRANSACTIONAL", true, "AFTER_HANDLER", 1);
  }
}
