package io.consumerdedup.examples;

import io.consumerdedup.examples.infra.Infrastructure;
import io.consumerdedup.examples.report.ReportPrinter;
import io.consumerdedup.examples.report.ScenarioResult;
import io.consumerdedup.examples.scenario.Scenario;
import io.consumerdedup.examples.scenario.Scenarios;
import java.io.PrintStream;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.stream.Collectors;

/**
 * Runs every scenario without and with dedup, prints the report, and exits non-zero if any run with
 * dedup applied an action twice or lost one, if a run did not meet the duplicate its scenario sets
 * out to cause, or if a scenario could not run.
 */
public final class Demo {
  private Demo() {}

  public static void main(String[] args) throws Exception {
    DemoOptions options;
    try {
      options = DemoOptions.parse(args, System.getenv());
    } catch (IllegalArgumentException e) {
      System.err.println(e.getMessage());
      System.exit(2);
      return;
    }
    if (options.help()) {
      System.out.print(DemoOptions.USAGE);
      return;
    }
    // Exit explicitly, also when the demo could not start: Kafka and PostgreSQL threads must not
    // keep the JVM alive.
    boolean passed;
    try {
      passed = run(options, System.out);
    } catch (Exception | Error e) {
      System.err.println("The demo could not run: " + e);
      e.printStackTrace();
      passed = false;
    }
    System.exit(passed ? 0 : 1);
  }

  /**
   * Runs the demo as {@code options} say; returns whether every scenario reproduced its fault and
   * dedup held through it.
   */
  public static boolean run(DemoOptions options, PrintStream out) throws Exception {
    Progress progress = Progress.to(out);
    List<Scenario> scenarios = select(options.only());
    try (Infrastructure infrastructure =
        Infrastructure.start(options.bootstrapServers(), options.jdbcUrl(), progress)) {
      DemoContext context =
          new DemoContext(
              infrastructure.bootstrapServers(),
              infrastructure.jdbcUrl(),
              options.fast() ? DemoSettings.fast() : DemoSettings.standard(),
              progress);
      return runAndReport(context, scenarios, out);
    }
  }

  /** Runs {@code scenarios}, prints the report; returns whether every one ran and passed. */
  static boolean runAndReport(DemoContext context, List<Scenario> scenarios, PrintStream out) {
    List<ScenarioResult> results = runAll(context, scenarios);
    new ReportPrinter(out).print(results, scenarios.size() - results.size());
    return results.size() == scenarios.size() && results.stream().allMatch(ScenarioResult::passed);
  }

  /**
   * Runs {@code scenarios} in order; one that cannot run is reported and left out of the results.
   */
  public static List<ScenarioResult> runAll(DemoContext context, List<Scenario> scenarios) {
    List<ScenarioResult> results = new ArrayList<>();
    for (Scenario scenario : scenarios) {
      Progress progress = context.progress().scoped(scenario.id());
      progress.step("starting");
      try {
        results.add(scenario.run(context));
        progress.step("done");
      } catch (Exception | LinkageError | AssertionError e) {
        // A scenario whose classes do not link throws an Error: the others can still run and be
        // reported. The demo fails either way, having fewer results than scenarios.
        progress.step("COULD NOT RUN: " + e);
        e.printStackTrace();
      }
    }
    return results;
  }

  /** The scenarios named in {@code ids}, or all of them if it is empty. */
  public static List<Scenario> select(List<String> ids) {
    List<Scenario> all = Scenarios.all();
    if (ids.isEmpty()) {
      return all;
    }
    Set<String> known = all.stream().map(Scenario::id).collect(Collectors.toSet());
    for (String id : ids) {
      if (!known.contains(id)) {
        throw new IllegalArgumentException("Unknown scenario '" + id + "'; known: " + known);
      }
    }
    return all.stream().filter(scenario -> ids.contains(scenario.id())).toList();
  }
}
