package io.consumerdedup.bench;

import java.util.List;
import org.jspecify.annotations.Nullable;

/**
 * What a benchmark run produced, for callers such as the smoke test.
 *
 * @param comparison the measured variants and their runs (empty if the comparison did not finish)
 * @param memory the heap measurement, or null if skipped or not finished
 * @param sweep the table-size sweep (empty if skipped or not finished)
 * @param purge the purge's measurement, or null if skipped or not finished
 * @param crashWindows the crash windows measured (with {@code --crash-window}), per path
 * @param resultLine the closing {@code RESULT} line, as printed
 * @param problems what went wrong: failed checks, or the error that stopped the run
 */
public record BenchResults(
    List<VariantSummary> comparison,
    HeapGrowth.@Nullable Result memory,
    List<TableSizeSweep.Point> sweep,
    PurgeBench.@Nullable Result purge,
    List<CrashWindow.Result> crashWindows,
    String resultLine,
    List<String> problems) {

  /** True if the run finished and every check passed. */
  public boolean passed() {
    return problems.isEmpty();
  }
}
