package io.consumerdedup.examples;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.examples.ledger.EffectKind;
import io.consumerdedup.examples.report.ReportPrinter;
import io.consumerdedup.examples.report.RunRow;
import io.consumerdedup.examples.report.ScenarioResult;
import io.consumerdedup.examples.scenario.Scenario;
import io.consumerdedup.examples.scenario.Scenarios;
import io.consumerdedup.testing.TestDatabase;
import io.consumerdedup.testing.TestKafka;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.function.Function;
import java.util.stream.Collectors;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Runs every scenario of the demo with fast settings, on the test PostgreSQL ({@code
 * DEDUP_TEST_JDBC_URL} when set) and an in-JVM broker, and checks the report's numbers: with dedup
 * each business action is applied exactly once; without it the double effect appears.
 *
 * <p>The scenarios run two at a time: each run has its own topic, consumer groups and schema, so
 * one scenario cannot see another's records or rows, and most of a scenario's time is spent waiting
 * (child JVMs starting, rebalances, leases). The longest ones start first.
 */
class DemoSmokeTest {
  /** The scenarios that take longest (child JVMs, a rebalance, Spring contexts), started first. */
  private static final List<String> LONGEST_FIRST =
      List.of("lost-ack", "crash-mid-handler", "zombie", "spring", "share");

  private static List<ScenarioResult> results;
  private static String report;

  @BeforeAll
  static void runTheDemo() throws Exception {
    ByteArrayOutputStream progress = new ByteArrayOutputStream();
    DemoContext context =
        new DemoContext(
            TestKafka.bootstrapServers(),
            TestDatabase.baseUrl(),
            DemoSettings.fast(),
            Progress.to(new PrintStream(progress, true, StandardCharsets.UTF_8)));
    results = runTwoAtATime(context, Scenarios.all());
    ByteArrayOutputStream printed = new ByteArrayOutputStream();
    new ReportPrinter(new PrintStream(printed, true, StandardCharsets.UTF_8)).print(results);
    report = printed.toString(StandardCharsets.UTF_8);
    System.out.println(progress.toString(StandardCharsets.UTF_8));
    System.out.println(report);
  }

  @Test
  void everyScenarioRan() {
    assertThat(results)
        .extracting(ScenarioResult::title)
        .hasSize(Scenarios.all().size())
        .anyMatch(title -> title.startsWith("1. Lost ACK"))
        .anyMatch(title -> title.startsWith("2. Impatient user"))
        .anyMatch(title -> title.startsWith("3. Payment provider callbacks"))
        .anyMatch(title -> title.startsWith("4. Handler fails mid-way"))
        .anyMatch(title -> title.startsWith("5. Zombie consumer"))
        .anyMatch(title -> title.startsWith("6. Fan-out"))
        .anyMatch(title -> title.startsWith("7. Spring Boot"))
        .anyMatch(title -> title.startsWith("8. Crash mid-handler"))
        .anyMatch(title -> title.startsWith("9. Work queue (share group)"));
  }

  @Test
  void lostAckChargesTwiceWithoutDedupAndOnceWithIt() {
    Map<String, RunRow> rows = rows("1. Lost ACK");
    assertCharges(rows.get("without dedup"), 2, 2, 0);
    assertCharges(rows.get("with dedup"), 2, 1, 1);
  }

  @Test
  void producerRetryChargesTheRepeatedOrderOnceWithDedup() {
    Map<String, RunRow> rows = rows("2. Impatient user");
    assertCharges(rows.get("without dedup"), 3, 3, 0);
    assertCharges(rows.get("with dedup"), 3, 2, 1);
  }

  @Test
  void fiveProviderCallbacksCaptureOnceWithDedup() {
    Map<String, RunRow> rows = rows("3. Payment provider callbacks");
    assertCharges(rows.get("without dedup"), 5, 5, 0);
    assertCharges(rows.get("with dedup"), 5, 1, 4);
  }

  @Test
  void aFailedAttemptIsRetriedAndChargedOnceNeitherLostNorDoubled() {
    Map<String, RunRow> rows = rows("4. Handler fails mid-way");
    for (RunRow row : rows.values()) {
      assertThat(row.delivered()).as(row.label()).isEqualTo(2);
      assertThat(row.handlerRuns()).as(row.label()).isEqualTo(2);
      assertThat(row.retries()).as(row.label()).isEqualTo(1);
      assertThat(row.effects()).as(row.label()).isEqualTo(1);
      assertThat(row.deadLettered()).as(row.label()).isZero();
      assertThat(row.verdict()).as(row.label()).isEqualTo(RunRow.Verdict.OK);
    }
    assertThat(result("4. Handler fails mid-way").notes())
        .anyMatch(note -> note.contains("SUCCESS on attempt 2"));
  }

  @Test
  void zombieAndItsSuccessorChargeTwiceWithoutDedupAndOnceWithIt() {
    Map<String, RunRow> rows = rows("5. Zombie consumer");
    assertCharges(rows.get("without dedup"), 2, 2, 0);
    RunRow withDedup = rows.get("with dedup");
    assertThat(withDedup.effects()).isEqualTo(1);
    assertThat(withDedup.handlerRuns()).isEqualTo(1);
    assertThat(withDedup.duplicatesSkipped()).isEqualTo(1);
    assertThat(withDedup.retries())
        .as("the successor found the key in progress at least once")
        .isPositive();
    assertThat(withDedup.verdict()).isEqualTo(RunRow.Verdict.OK);
    assertThat(result("5. Zombie consumer").notes())
        .anyMatch(
            note ->
                note.startsWith("with dedup: consumer A ended")
                    && note.contains("consumer B ended CAUGHT_UP"));
    assertThat(result("5. Zombie consumer").notes())
        .as("without dedup the zombie's commit is refused: it really was thrown out of the group")
        .anyMatch(note -> note.startsWith("without dedup: consumer A ended FENCED"));
  }

  @Test
  void fanOutAppliesEachPaymentOncePerService() {
    Map<String, RunRow> rows = rows("6. Fan-out");
    for (String service : List.of("points", "coupons")) {
      RunRow without = rows.get(service + ", without dedup");
      assertThat(without.effects()).as(without.label()).isEqualTo(3);
      assertThat(without.verdict()).as(without.label()).isEqualTo(RunRow.Verdict.DOUBLE_EFFECT);
      RunRow with = rows.get(service + ", with dedup");
      assertThat(with.effects()).as(with.label()).isEqualTo(2);
      assertThat(with.duplicatesSkipped()).as(with.label()).isEqualTo(1);
      assertThat(with.verdict()).as(with.label()).isEqualTo(RunRow.Verdict.OK);
    }
    assertThat(rows.get("points, with dedup").balance()).isEqualTo(200);
    assertThat(rows.get("coupons, with dedup").balance()).isEqualTo(2);
  }

  @Test
  void springListenerChargesEachOrderOnceThroughALostAckAndAProducerRetry() {
    Map<String, RunRow> rows = rows("7. Spring Boot");
    assertCharges(rows.get("without dedup"), 4, 4, 0);
    assertCharges(rows.get("with dedup"), 4, 2, 2);
  }

  @Test
  void aCrashBetweenChargeAndSuccessChargesTwiceUnlessTheDedupRowIsInTheChargesTransaction() {
    Map<String, RunRow> rows = rows("8. Crash mid-handler");
    assertCharges(rows.get("without dedup"), 2, 2, 0);

    RunRow separate = rows.get("dedup SEPARATE");
    assertThat(separate.handlerRuns()).as("SEPARATE handler runs").isEqualTo(2);
    assertThat(separate.effects()).as("SEPARATE charges").isEqualTo(2);
    assertThat(separate.balance()).isEqualTo(EffectKind.CHARGE.balanceAfter(2));
    assertThat(separate.verdict()).isEqualTo(RunRow.Verdict.DOUBLE_EFFECT_IN_WINDOW);
    assertThat(separate.verdictText()).isEqualTo("DOUBLE CHARGE (window)");

    RunRow transactional = rows.get("dedup TRANSACTIONAL");
    assertThat(transactional.delivered()).as("TRANSACTIONAL delivered").isEqualTo(2);
    assertThat(transactional.handlerRuns())
        .as("TRANSACTIONAL handler runs: the killed child's, rolled back, and the restart's")
        .isEqualTo(2);
    assertThat(transactional.effects()).as("TRANSACTIONAL charges").isEqualTo(1);
    assertThat(transactional.balance()).isEqualTo(EffectKind.CHARGE.balanceAfter(1));
    assertThat(transactional.verdict()).isEqualTo(RunRow.Verdict.OK);

    ScenarioResult result = result("8. Crash mid-handler");
    assertThat(result.dedupHeld()).as("the window is expected, not a failure").isTrue();
    assertThat(result.notes())
        .anyMatch(
            note ->
                note.contains("dedup SEPARATE 1 charge, key PROCESSING")
                    && note.contains("dedup TRANSACTIONAL 0 charges, no dedup row"))
        .anyMatch(note -> note.contains("took the key over (attempt 2)"));
  }

  /**
   * Two share consumers of one partition: the order sent twice is charged by both copies without
   * dedup, once with it (the copy skipped as a duplicate).
   */
  @Test
  void aShareGroupChargesTheRepeatedOrderTwiceWithoutDedupAndOnceWithIt() {
    Map<String, RunRow> rows = rows("9. Work queue (share group)");
    assertCharges(rows.get("without dedup"), 3, 3, 0);
    assertCharges(rows.get("with dedup"), 3, 2, 1);
  }

  @Test
  void reportShowsTheDoubleChargeAndTheResult() {
    assertThat(report)
        .contains("DOUBLE CHARGE")
        .contains("DOUBLE CHARGE (window)")
        .contains("RESULT: with dedup, every scenario applied each business action exactly once");
    assertThat(results).allMatch(ScenarioResult::passed);
  }

  /**
   * Each scenario as {@link Demo#runAll} runs it (one that cannot run is left out), two at a time;
   * the results in the order of {@code scenarios}, as the demo reports them.
   */
  private static List<ScenarioResult> runTwoAtATime(DemoContext context, List<Scenario> scenarios)
      throws Exception {
    List<Scenario> started =
        scenarios.stream()
            .sorted(
                Comparator.comparingInt(
                    scenario -> {
                      int rank = LONGEST_FIRST.indexOf(scenario.id());
                      return rank < 0 ? LONGEST_FIRST.size() : rank;
                    }))
            .toList();
    ExecutorService lanes = Executors.newFixedThreadPool(2);
    try {
      Map<Scenario, Future<List<ScenarioResult>>> running = new HashMap<>();
      for (Scenario scenario : started) {
        running.put(scenario, lanes.submit(() -> Demo.runAll(context, List.of(scenario))));
      }
      List<ScenarioResult> inOrder = new ArrayList<>();
      for (Scenario scenario : scenarios) {
        inOrder.addAll(running.get(scenario).get());
      }
      return inOrder;
    } finally {
      lanes.shutdownNow();
    }
  }

  /**
   * A charge scenario's run: as many effects as handler runs, balance to match, and the verdict the
   * numbers call for.
   */
  private static void assertCharges(RunRow row, int delivered, int charges, int duplicates) {
    assertThat(row.kind()).isEqualTo(EffectKind.CHARGE);
    assertThat(row.delivered()).as(row.label() + " delivered").isEqualTo(delivered);
    assertThat(row.handlerRuns()).as(row.label() + " handler runs").isEqualTo(charges);
    assertThat(row.effects()).as(row.label() + " charges").isEqualTo(charges);
    assertThat(row.balance())
        .as(row.label() + " balance")
        .isEqualTo(EffectKind.CHARGE.balanceAfter(charges));
    assertThat(row.duplicatesSkipped()).as(row.label() + " duplicates").isEqualTo(duplicates);
    assertThat(row.deadLettered()).as(row.label() + " dead-lettered").isZero();
    assertThat(row.verdict())
        .as(row.label() + " verdict")
        .isEqualTo(row.withDedup() ? RunRow.Verdict.OK : RunRow.Verdict.DOUBLE_EFFECT);
  }

  private static ScenarioResult result(String titlePrefix) {
    return results.stream()
        .filter(result -> result.title().startsWith(titlePrefix))
        .findFirst()
        .orElseThrow(() -> new AssertionError("No scenario titled " + titlePrefix + "..."));
  }

  private static Map<String, RunRow> rows(String titlePrefix) {
    return result(titlePrefix).rows().stream()
        .collect(Collectors.toMap(RunRow::label, Function.identity()));
  }
}
