package io.consumerdedup.bench;

import io.consumerdedup.bench.BenchDatabase.TableActivity;
import java.util.List;
import java.util.function.ToDoubleFunction;

/**
 * The runs of one variant and their medians.
 *
 * @param variant the variant
 * @param runs its runs, in the order they ran
 */
public record VariantSummary(Variant variant, List<VariantRun> runs) {

  /** The median over the runs of {@code metric}. */
  public double median(ToDoubleFunction<VariantRun> metric) {
    double[] values = runs.stream().mapToDouble(metric).sorted().toArray();
    int middle = values.length / 2;
    return values.length % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
  }

  /** Whether every run passed its checks. */
  public boolean passed() {
    return runs.stream().allMatch(run -> run.problems().isEmpty());
  }

  /** The median throughput, in messages per second. */
  public double messagesPerSecond() {
    return median(VariantRun::messagesPerSecond);
  }

  /** The dedup table's updates over all runs. */
  public TableActivity dedupTableActivity() {
    return runs.stream()
        .map(VariantRun::dedupTableActivity)
        .reduce(new TableActivity(0, 0), TableActivity::plus);
  }
}
