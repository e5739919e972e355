package io.consumerdedup.bench;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.bench.BenchDatabase.TableActivity;
import java.util.List;
import java.util.OptionalLong;
import org.HdrHistogram.Histogram;
import org.junit.jupiter.api.Test;

/** The RESULT line gives no ratio of a variant whose run failed its checks. */
class ResultLineTest {
  private static final Workload WORKLOAD = new Workload("t", 4, 100, 95, 100);

  @Test
  void aRatioOfTwoSoundVariantsIsGiven() {
    String line =
        Report.resultLine(
            List.of(summary(OursLoop.batched(), 95, 1.0), summary(OursLoop.newKeys(), 95, 2.0)),
            null);

    assertThat(line).contains(" batched_over_per_record=2.00 ");
  }

  @Test
  void aVariantThatAppliedKeysTwiceGivesNoRatio() {
    List<VariantSummary> summaries =
        List.of(summary(OursLoop.batched(), 97, 1.0), summary(OursLoop.newKeys(), 95, 2.0));

    assertThat(summaries.get(0).runs().get(0).problems()).isNotEmpty();
    assertThat(Report.resultLine(summaries, null))
        .as("the RESULT line of a run in which V2 ran its handler twice for two keys")
        .contains(" batched_over_per_record=n/a ");
  }

  @Test
  void aHeapRunThatFailedItsChecksGivesNoGrowth() {
    HeapGrowth.Result sound = new HeapGrowth.Result(200, 1_000, 100, 110, 1.0, List.of());
    HeapGrowth.Result failed =
        new HeapGrowth.Result(200, 1_000, 100, 110, 1.0, List.of("memory: consumed 900 of 1000"));

    assertThat(Report.resultLine(List.of(), sound)).endsWith(" heap_growth=1.10");
    assertThat(Report.resultLine(List.of(), failed)).endsWith(" heap_growth=n/a");
  }

  /** One run of {@code variant} over the workload, {@code seconds} long. */
  private static VariantSummary summary(Variant variant, long handlerRuns, double seconds) {
    Histogram latency = new Histogram(3);
    latency.recordValue(1_000);
    return new VariantSummary(
        variant,
        List.of(
            new VariantRun(
                variant.id(),
                "r1",
                WORKLOAD,
                variant.expectedHandlerRuns(),
                WORKLOAD.messages(),
                0,
                handlerRuns,
                WORKLOAD.distinctKeys(),
                (long) (seconds * 1e9),
                latency,
                1,
                1,
                1,
                new TableActivity(0, 0),
                OptionalLong.of(WORKLOAD.distinctKeys()))));
  }
}
