package io.consumerdedup.examples.report;

import java.util.List;

/**
 * A scenario's runs, side by side, and notes on what the reader should see in them.
 *
 * @param title such as {@code 1. Lost ACK}
 * @param incident the real-world incident the scenario reproduces, in one sentence
 */
public record ScenarioResult(String title, String incident, List<RunRow> rows, List<String> notes) {

  public ScenarioResult {
    rows = List.copyOf(rows);
    notes = List.copyOf(notes);
  }

  /**
   * Whether every run behind the library applied each action exactly once, or doubled it only in
   * the documented window the run reproduces on purpose.
   */
  public boolean dedupHeld() {
    return rows.stream().filter(RunRow::withDedup).allMatch(row -> row.verdict().asDocumented());
  }

  /** Whether every run, with dedup or without, met the duplicate the scenario sets out to cause. */
  public boolean faultReproduced() {
    return rows.stream().noneMatch(row -> row.verdict() == RunRow.Verdict.FAULT_NOT_REPRODUCED);
  }

  /** Whether the scenario shows what it claims: the fault happened, and dedup held through it. */
  public boolean passed() {
    return faultReproduced() && dedupHeld();
  }

  /** Whether a run here shows the documented window of {@code DedupMode.SEPARATE}. */
  public boolean showsWindow() {
    return rows.stream().anyMatch(row -> row.verdict() == RunRow.Verdict.DOUBLE_EFFECT_IN_WINDOW);
  }
}
