package io.consumerdedup.faults;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.consumerdedup.testing.ChildJvm;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The suite's own counting, on a real run (database, broker, child JVMs) with a history written by
 * hand: a wrong tally passes a scenario whose fault did not happen or whose duplicates are not the
 * ones its kills explain. Named *Tests, not *Test: {@link ReliabilityReport} expects a row from
 * every *Test method, and these are not scenarios.
 */
class FaultRunTallyTests {
  private static final Duration LEASE = Duration.ofSeconds(3);

  @Test
  void aKeyAppliedTwiceIsNotExcusedByTheWindowOfAnotherKey() throws Exception {
    try (FaultRun run = new FaultRun(Target.PLAIN, "tally per key", "SEPARATE", false, LEASE)) {
      ChildJvm killed = run.start("a", null);
      run.execute("INSERT INTO effects (biz_key, consumer) VALUES ('caught', 'a-1')");
      run.killAnyTime(killed);
      // The killed consumer's SUCCESS of 'caught' landed after its window was measured: 'caught'
      // is never applied again. 'twice' is applied twice with no kill to explain it.
      success(run, "caught");
      success(run, "twice");
      run.execute("INSERT INTO effects (biz_key, consumer) VALUES ('twice', 'b'), ('twice', 'b')");

      FaultRun.Verdict verdict = run.verify();

      assertThat(verdict.window()).isEqualTo(1);
      assertThat(verdict.duplicates()).isEqualTo(1);
      assertThat(verdict.violations()).as("violations").anyMatch(v -> v.contains("twice"));
    }
  }

  @Test
  void aConsumerThatReachedItsFaultPointButExitedCleanlyIsNotACrash() throws Exception {
    try (FaultRun run = new FaultRun(Target.PLAIN, "tally crash", "SEPARATE", false, LEASE)) {
      run.produce(1, "order-");
      // The fault point is reached, but its action (an Error the supervisor survives) is no crash.
      ChildJvm consumer = run.start("a", "AFTER_HANDLER:error:1");
      consumer.awaitLine("FAULT AFTER_HANDLER", Duration.ofSeconds(60));
      consumer.send("stop");

      assertThatThrownBy(() -> run.awaitCrash(consumer, Duration.ofSeconds(30)))
          .isInstanceOf(AssertionError.class)
          .hasMessageContaining("exit code 0");
      assertThat(run.kills).isZero();
    }
  }

  @Test
  void aConsumerThatDiedOnItsOwnBeforeItsKillIsNotAKill() throws Exception {
    try (FaultRun run = new FaultRun(Target.PLAIN, "tally kill", "SEPARATE", false, LEASE)) {
      // A handler time it cannot read: the consumer ends at its start, before any fault.
      run.consumerArg("handlerMs", "not a number");
      ChildJvm consumer = run.start("a", null);
      consumer.awaitExit(Duration.ofSeconds(60));

      run.killAnyTime(consumer);

      assertThat(run.verify().violations())
          .as("violations")
          .anyMatch(v -> v.contains("died without halting at a fault point"));
    }
  }

  @Test
  void aScenarioSkippedInCiFailsTheReport(@TempDir Path dir) throws Exception {
    Path results = Files.createDirectories(dir.resolve("reliability"));
    Path reports = Files.createDirectories(dir.resolve("surefire-reports"));
    Files.writeString(
        results.resolve(Reliability.SCENARIOS_PREFIX + "-1" + Reliability.SCENARIOS_SUFFIX),
        String.join("\t", "F1 ran", "SEPARATE per-record", "passed", "10", "0", "0", "0", "0", "0")
            + "\t0\t1000\tnotes\t\n");
    // The other scenario was skipped: its server was missing.
    Files.writeString(
        reports.resolve("TEST-io.consumerdedup.faults.MariaDbFaultsTest.xml"),
        "<testsuite name=\"MariaDbFaultsTest\" tests=\"1\" errors=\"0\" skipped=\"1\""
            + " failures=\"0\"></testsuite>");

    try (ChildJvm report =
        ChildJvm.start(
            Map.of("CI", "true"),
            ReliabilityReport.class,
            results.toString(),
            reports.toString(),
            "F1")) {
      assertThat(report.awaitExit(Duration.ofSeconds(60)))
          .as("exit code of the report; its output:\n%s", report.output())
          .isNotZero();
      assertThat(report.output()).contains("1 scenario(s) skipped in CI");
    }
  }

  private static void success(FaultRun run, String key) {
    run.execute(
        "INSERT INTO consumer_dedup (biz_type, biz_key, status, owner, expires_at) VALUES ('"
            + FaultConsumer.BIZ_TYPE
            + "', '"
            + key
            + "', 'SUCCESS', 'test', now() + interval '1 day')");
  }
}
