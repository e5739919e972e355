package io.consumerdedup.bench;

import static java.nio.charset.StandardCharsets.UTF_8;
import static org.assertj.core.api.Assertions.assertThat;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.util.Map;
import java.util.function.Function;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;

/**
 * Runs the benchmark with tiny counts, so that it keeps compiling and running: every measured
 * variant consumes every message and applies what it should, the heap is measured, and the report
 * ends with the RESULT line.
 */
class BenchSmokeTest {
  private static final int MESSAGES = 1_000;
  private static final int PURGE_TABLE_ROWS = 1_000;
  private static final int MEMORY_SMALLER = 200;
  private static final int MEMORY_LARGER = 1_000;

  @Test
  void everyMeasuredVariantConsumesEveryMessageAndTheReportEndsWithTheResultLine() {
    ByteArrayOutputStream report = new ByteArrayOutputStream();
    BenchResults results =
        Bench.run(
            BenchOptions.parse(
                "--messages=" + MESSAGES,
                "--repetitions=1",
                "--sweep=none",
                "--memory=" + MEMORY_SMALLER + "," + MEMORY_LARGER,
                "--purge-rows=" + PURGE_TABLE_ROWS),
            new PrintStream(report, true, UTF_8),
            System.err);

    String output = report.toString(UTF_8);
    assertThat(results.problems()).isEmpty();
    assertThat(output.strip().lines().reduce((first, second) -> second))
        .hasValue(results.resultLine());
    assertThat(results.resultLine())
        .matches(
            "RESULT batched_over_per_record=%1$s batched_over_camel=%1$s"
                .concat(" batched_over_spring_integration=%1$s batched_over_plain=%1$s")
                .concat(" per_record_over_camel=%1$s duplicates_over_per_record=%1$s")
                .concat(" transactional_over_camel=%1$s spring_record_over_camel=%1$s")
                .concat(" spring_record_over_plain_spring=%1$s share_over_plain_share=%1$s")
                .concat(" spring_share_over_plain_share=%1$s heap_growth=%1$s")
                .formatted("\\d+\\.\\d\\d"));

    Map<String, VariantRun> runs =
        results.comparison().stream()
            .map(summary -> summary.runs().get(0))
            .collect(Collectors.toMap(VariantRun::variantId, Function.identity()));
    assertThat(runs)
        .containsOnlyKeys("V0", "V1", "V2", "V3", "V4", "V5", "V6", "V7", "V8", "V9", "V10", "V11");
    int distinctKeys = runs.get("V0").workload().distinctKeys();
    assertThat(distinctKeys).isLessThan(MESSAGES);
    runs.values()
        .forEach(
            run -> {
              assertThat(run.done()).as(run.variantId() + " consumed").isEqualTo(MESSAGES);
              assertThat(run.deadLettered()).as(run.variantId() + " dead-lettered").isZero();
              assertThat(run.messagesPerSecond()).as(run.variantId() + " msg/s").isPositive();
            });
    for (String plain : new String[] {"V0", "V8", "V9"}) {
      assertThat(runs.get(plain).handlerRuns()).as(plain + " handler runs").isEqualTo(MESSAGES);
    }
    for (String deduplicating : new String[] {"V1", "V2", "V3", "V4", "V5", "V7", "V10", "V11"}) {
      assertThat(runs.get(deduplicating).handlerRuns())
          .as(deduplicating + " handler runs")
          .isEqualTo(distinctKeys);
      assertThat(runs.get(deduplicating).distinctKeysApplied())
          .as(deduplicating + " distinct keys applied")
          .isEqualTo(distinctKeys);
    }
    assertThat(runs.get("V6").handlerRuns()).as("V6 handler runs").isZero();
    // Per record: a claim per record, each carrying the previous record's SUCCESS.
    assertThat(runs.get("V1").databaseCommits()).isGreaterThanOrEqualTo(distinctKeys);
    assertThat(runs.get("V2").databaseCommits())
        .as("V2 claims per poll and groups its SUCCESS marks")
        .isLessThan(runs.get("V1").databaseCommits() / 2);
    // Measured like the poll loops: polls through the consumer, a commitSync per poll (ack mode
    // BATCH), and the @Idempotent listener's claims in the database.
    for (String spring : new String[] {"V7", "V8"}) {
      assertThat(runs.get(spring).commitSyncs()).as(spring + " commitSync calls").isPositive();
      assertThat(runs.get(spring).latencyMicros().getTotalCount())
          .as(spring + " records timed from their poll")
          .isEqualTo(MESSAGES);
    }
    assertThat(runs.get("V7").databaseCommits())
        .as("V7 claims per poll and groups its SUCCESS marks")
        .isLessThan(runs.get("V1").databaseCommits() / 2);
    assertThat(runs.get("V8").databaseCommits()).as("V8 has no dedup").isLessThan(distinctKeys);
    assertThat(runs.get("V11").databaseCommits())
        .as("V11 claims the records handed to its worker together and groups its SUCCESS marks")
        .isLessThan(runs.get("V1").databaseCommits() / 2);

    HeapGrowth.Result memory = results.memory();
    assertThat(memory).isNotNull();
    assertThat(memory.smaller()).isEqualTo(MEMORY_SMALLER);
    assertThat(memory.larger()).isEqualTo(MEMORY_LARGER);
    assertThat(memory.heapAtSmaller()).isPositive();
    assertThat(memory.heapAtLarger()).isPositive();
    assertThat(output).contains("heap_growth " + String.format("%.2f", memory.growth()));

    assertThat(results.purge()).isNotNull();
    assertThat(results.purge().expiredRows()).as("about half expired").isBetween(400L, 600L);
    // Rows loaded unexpired may expire while the janitor runs: at least the expired ones go.
    assertThat(results.purge().deleted())
        .isBetween(results.purge().expiredRows(), (long) PURGE_TABLE_ROWS);
  }
}
