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
 * The suite's record: one line per scenario in {@code <faults.results>/scenarios-<pid>.tsv} (one
 * file per test JVM), read by {@link ReliabilityReport} once every scenario has run, and the seed
 * every random choice of the run derives from ({@code -Dfaults.seed=...} replays a run).
 */
final class Reliability {
  static final String SCENARIOS_PREFIX = "scenarios";
  static final String SCENARIOS_SUFFIX = ".tsv";
  private static final String SCENARIOS_FILE =
      SCENARIOS_PREFIX + "-" + ProcessHandle.current().pid() + SCENARIOS_SUFFIX;
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

  /** The seed given, else the build's time stamp (the same in every test JVM), else a new one. */
  private static long chooseSeed() {
    String given = System.getProperty("faults.seed", "");
    if (!given.isBlank()) {
      return Long.parseLong(given.trim());
    }
    String stamp = System.getProperty("faults.runStamp", "");
    return stamp.matches("\\d{1,18}") ? Long.parseLong(stamp) : new Random().nextLong();
  }

  private static Path resultsDirectory() {
    Path dir = Path.of(System.getProperty("faults.results", "target/reliability"));
    try {
      Files.createDirectories(dir);
      // A new run of this test JVM: its results of an earlier run must not be counted (the build
      // removes the whole folder before the tests; this is for a run outside the build).
      Files.deleteIfExists(dir.resolve(SCENARIOS_FILE));
      // Written once per run (the other test JVM may have written it): the report reads its time
      // as the run's start.
      try {
        Files.writeString(
            dir.resolve(SEED_FILE),
            Long.toString(SEED),
            StandardCharsets.UTF_8,
            StandardOpenOption.CREATE_NEW,
            StandardOpenOption.WRITE);
      } catch (java.nio.file.FileAlreadyExistsException sameRun) {
        // The other test JVM of this run wrote the same seed.
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return dir;
  }
}
