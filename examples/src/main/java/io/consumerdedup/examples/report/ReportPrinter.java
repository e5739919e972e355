package io.consumerdedup.examples.report;

import java.io.PrintStream;
import java.util.List;

/** Prints the results as fixed-width tables a person can read at a glance. */
public final class ReportPrinter {
  private static final String ROW_FORMAT = "  %-24s %9s %5s %11s %8s %5s %8s %4s  %s%n";

  private final PrintStream out;

  public ReportPrinter(PrintStream out) {
    this.out = out;
  }

  public void print(List<ScenarioResult> results) {
    print(results, 0);
  }

  /**
   * Prints {@code results}; {@code couldNotRun} scenarios were to run as well but failed before
   * they had a result.
   */
  public void print(List<ScenarioResult> results, int couldNotRun) {
    out.println();
    out.println("=".repeat(110));
    out.println("REPORT: each scenario without and with consumer-dedup");
    out.println(
        "  delivered = records handed to a consumer (redeliveries count again); runs = handler"
            + " runs;");
    out.println(
        "  effects = rows booked in the ledger; balance = the account after them; dups = duplicates"
            + " skipped;");
    out.println(
        "  retries = redeliveries after a failure or an in-progress key; DLT = dead-lettered");
    boolean windowShown = results.stream().anyMatch(ScenarioResult::showsWindow);
    if (windowShown) {
      out.println(
          "  (window) = the documented window of DedupMode.SEPARATE, reproduced on purpose: expected,"
              + " not a failure");
    }
    for (ScenarioResult result : results) {
      print(result);
    }
    out.println();
    List<ScenarioResult> failed = results.stream().filter(result -> !result.passed()).toList();
    if (failed.isEmpty() && couldNotRun == 0) {
      out.println(
          "RESULT: with dedup, every scenario applied each business action exactly once (no double"
              + " effect, nothing lost)"
              + (windowShown ? "," : "."));
      if (windowShown) {
        out.println(
            "  apart from the documented window of DedupMode.SEPARATE, shown on purpose;"
                + " DedupMode.TRANSACTIONAL closes it.");
      }
    } else {
      // A scenario that could not run is missing from the tables above: a success line would
      // hide it.
      if (couldNotRun > 0) {
        out.println(
            "RESULT: FAILED: "
                + couldNotRun
                + " scenario(s) could not run (see COULD NOT RUN in the progress above).");
      }
      if (failed.isEmpty()) {
        return;
      }
      out.println(
          "RESULT: FAILED: "
              + failed.size()
              + " scenario(s) show a double effect or a lost message with dedup, or did not"
              + " reproduce their fault:");
      for (ScenarioResult result : failed) {
        out.println("  " + result.title());
      }
    }
  }

  private void print(ScenarioResult result) {
    out.println();
    out.println(result.title());
    out.println("  " + result.incident());
    out.printf(
        ROW_FORMAT,
        "",
        "delivered",
        "runs",
        "effects",
        "balance",
        "dups",
        "retries",
        "DLT",
        "verdict");
    for (RunRow row : result.rows()) {
      out.printf(
          ROW_FORMAT,
          row.label(),
          row.delivered(),
          row.handlerRuns(),
          row.effects() + " " + row.kind().plural(),
          row.kind().format(row.balance()),
          row.duplicatesSkipped(),
          row.retries(),
          row.deadLettered(),
          row.verdictText());
    }
    for (String note : result.notes()) {
      out.println("  note: " + note);
    }
  }
}
