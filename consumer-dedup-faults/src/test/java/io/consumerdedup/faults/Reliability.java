package io.consumerdedup.faults;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.Random;

/**
 * The suite's record: one line per scenario in {@code <faults.results>/scenarios.tsv}, read by
 * {@link ReliabilityReport} once every scenario has run, and the seed every random choice of the
 * run derives from ({@code -Dfaults.seed=...} replays a run).
 */
final class Reliability {
  static final String SCENARIOS_FILE = "scenarios.tsv";
  static final String SEED_FILE = "seed.txt";
  private static final long SEED = chooseSeed();
  private static final Path RESULTS = resultsDirectory();

  private Reliability() {}

  static long seed() {
    return SEED;
  }

  /** A random source of its own per scenario, so one scenario's draws do not shift another's. */
  static Random random(String scenario) {
    return new Random(SEED ^ scenario.hashCode());
  }

  /** The body of a scenario, run between the start of its {@link FaultRun} and its check. */
  @FunctionalInterface
  interface Body {
    void run(FaultRun run) throws Exception;
  }

  /** Runs a scenario, records its verdict, and fails the test if an invariant was violated. */
  static FaultRun.Verdict scenario(
      String name, String mode, boolean batched, Duration lease, Body body) throws Exception {
    return scenario(Target.PLAIN, name, mode, batched, lease, body);
  }

  /** As {@link #scenario(String, String, boolean, Duration, Body)}, on {@code target}. */
  static FaultRun.Verdict scenario(
      Target target, String name, String mode, boolean batched, Duration lease, Body body)
      throws Exception {
    FaultRun.Verdict verdict;
    String scenario = target.scenarioName(name);
    try (FaultRun run = new FaultRun(target, scenario, mode, batched, lease)) {
      try {
        body.run(run);
      } catch (Exception | AssertionError e) {
        run.violation("the scenario failed: " + e);
      }
      verdict = run.verify();
    }
    record(verdict);
    if (!verdict.passed()) {
      throw new AssertionError(
          scenario + " violated invariants:\n" + String.join("\n", verdict.violations()));
    }
    return verdict;
  }

  static synchronized void record(FaultRun.Verdict v) {
    String line =
        String.join(
                "\t",
                v.name(),
                v.mode(),
                v.passed() ? "passed" : "FAILED",
                String.valueOf(v.records()),
                String.valueOf(v.lost()),
                String.valueOf(v.duplicates()),
                String.valueOf(v.window()),
                String.valueOf(v.kills()),
                String.valueOf(v.deadLettered()),
                String.valueOf(v.recoveryMillis()),
                String.valueOf(v.recoveryBoundMillis()),
                clean(String.join("; ", v.notes())),
                clean(String.join(" | ", v.violations())))
            + "\n";
    System.out.print("[faults] " + line);
    try {
      Files.writeString(
          RESULTS.resolve(SCENARIOS_FILE),
          line,
          StandardCharsets.UTF_8,
          StandardOpenOption.CREATE,
          StandardOpenOption.APPEND);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /**
   * Keeps a consumer's output as {@code <faults.results>/consumers/<scenario>/<consumer>.log}, so a
   * failed scenario can be read afterwards (in CI too).
   */
  static void saveOutput(String scenario, String consumer, String output) {
    Path dir = RESULTS.resolve("consumers").resolve(scenario.replaceAll("[^A-Za-z0-9]+", "-"));
    try {
      Files.createDirectories(dir);
      Files.writeString(dir.resolve(consumer + ".log"), output, StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static String clean(String text) {
    String oneLine = text.replace('\t', ' ').replace('\n', ' ');
    return oneLine.length() > 2000 ? oneLine.substring(0, 2000) + "..." : oneLine;
  }

  private static long chooseSeed() {
    String given = System.getProperty("faults.seed", "");
    return given.isBlank() ? new Random().nextLong() : Long.parseLong(given.trim());
  }

  private static Path resultsDirectory() {
    Path dir = Path.of(System.getProperty("faults.results", "target/reliability"));
    try {
      Files.createDirectories(dir);
      // A new run: the results of an earlier one must not be counted.
      Files.deleteIfExists(dir.resolve(SCENARIOS_FILE));
      Files.writeString(dir.resolve(SEED_FILE), Long.toString(SEED), StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return dir;
  }
}
