package io.consumerdedup.bench;

import io.consumerdedup.testing.TestDatabase;
import java.io.PrintStream;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Random;
import java.util.concurrent.ThreadLocalRandom;
import org.apache.kafka.common.utils.AppInfoParser;
import org.jspecify.annotations.Nullable;

/**
 * The benchmark: produces the workload once to an in-JVM Kafka broker, then, against one PostgreSQL
 * database of its own, runs the comparison of the variants, the heap measurement, the table-size
 * sweep and the purge, and prints the report, ending with the {@code RESULT} line.
 *
 * <pre>
 * mvn -B -q -pl consumer-dedup-bench -am verify -DskipTests -Pbench -Dbench.args=--quick
 * </pre>
 *
 * <p>PostgreSQL is the server of {@code DEDUP_TEST_JDBC_URL} if set, else one that {@link
 * TestDatabase} starts (a Testcontainers container if Docker is reachable, else an embedded one).
 * See {@link BenchOptions} for the arguments.
 */
public final class Bench {
  /** Keeps the workload's keys and their order the same from run to run. */
  private static final long SEED = 20_240_901;

  /**
   * The warm-up pass consumes a quarter of the workload's count of other messages, at most this.
   */
  private static final int MAX_WARM_UP_MESSAGES = 1_000;

  private Bench() {}

  /** Runs the benchmark; exits with 0 if every check passed, 1 if not, 2 for bad arguments. */
  public static void main(String[] args) {
    int status;
    try {
      status = run(BenchOptions.parse(args), System.out, System.err).passed() ? 0 : 1;
    } catch (IllegalArgumentException e) {
      System.err.println(e.getMessage());
      System.out.println(Report.resultLine(List.of(), null));
      status = 2;
    }
    System.out.flush();
    System.exit(status);
  }

  /**
   * Runs the benchmark, writing the report to {@code out} and progress to {@code progress}. Prints
   * the {@code RESULT} line whatever happens; an error that stops the run is in the problems.
   */
  public static BenchResults run(BenchOptions options, PrintStream out, PrintStream progress) {
    long start = System.nanoTime();
    Report report = new Report(out);
    List<String> problems = new ArrayList<>();
    List<VariantSummary> comparison = List.of();
    List<TableSizeSweep.Point> sweep = List.of();
    HeapGrowth.@Nullable Result memory = null;
    PurgeBench.@Nullable Result purge = null;
    List<CrashWindow.Result> crashWindows = List.of();
    try {
      progress.println("[bench] starting the in-JVM Kafka broker and finding PostgreSQL ...");
      try (BenchBroker broker = BenchBroker.start();
          BenchDatabase database = BenchDatabase.create(TestDatabase.baseUrl())) {
        String topic = "bench-" + HexFormat.of().toHexDigits(ThreadLocalRandom.current().nextInt());
        progress.printf("[bench] producing %,d messages to %s ...%n", options.messages(), topic);
        Workload workload =
            Workload.produce(
                broker,
                topic,
                BenchOptions.PARTITIONS,
                options.messages(),
                BenchOptions.DUPLICATE_RATE,
                BenchOptions.VALUE_BYTES,
                SEED);
        Workload warmUp =
            Workload.produce(
                broker,
                topic + "-warm-up",
                BenchOptions.PARTITIONS,
                Math.max(1, Math.min(MAX_WARM_UP_MESSAGES, options.messages() / 4)),
                BenchOptions.DUPLICATE_RATE,
                BenchOptions.VALUE_BYTES,
                SEED + 1);
        report.setUp(
            options,
            Machine.describe(),
            postgresql(database),
            AppInfoParser.getVersion(),
            workload,
            warmUp);
        if (options.crashWindow()) {
          crashWindows =
              List.of(
                  CrashWindow.run(
                      broker,
                      database,
                      workload,
                      true,
                      options.kills(),
                      new Random(SEED),
                      progress),
                  CrashWindow.run(
                      broker,
                      database,
                      workload,
                      false,
                      options.kills(),
                      new Random(SEED + 1),
                      progress));
          report.crashWindows(crashWindows);
          crashWindows.stream()
              .filter(window -> !window.consistent())
              .forEach(
                  window ->
                      problems.add(
                          "crash window "
                              + window.path()
                              + ": "
                              + window.keysNotSuccess()
                              + " key(s) not SUCCESS, "
                              + window.keysNotApplied()
                              + " key(s) never applied, "
                              + window.extraEffects()
                              + " extra effect(s) for "
                              + window.sum()
                              + " counted at the kills"));
          return finish(out, start, problems, comparison, memory, sweep, purge, crashWindows);
        }
        VariantRunner runner = new VariantRunner(database, broker, workload, progress);

        comparison =
            Comparison.run(
                Comparison.selected(options.variants()),
                runner,
                new VariantRunner(database, broker, warmUp, progress),
                database,
                options.repetitions());
        comparison.forEach(
            summary -> summary.runs().forEach(run -> problems.addAll(run.problems())));
        report.comparison(comparison, options.repetitions());
        report.checks(problems, comparison);

        if (!options.memoryRecords().isEmpty()) {
          memory =
              HeapGrowth.run(
                  broker,
                  database,
                  options.memoryRecords().get(0),
                  options.memoryRecords().get(1),
                  progress);
          problems.addAll(memory.problems());
          report.memory(memory);
        }

        if (!options.sweepSizes().isEmpty()) {
          progress.println("[bench] table-size sweep ...");
          sweep = TableSizeSweep.run(database, runner, options.sweepSizes());
          sweep.forEach(point -> problems.addAll(point.run().problems()));
          report.sweep(sweep);
        }
        if (options.purgeRows() > 0) {
          progress.printf(
              "[bench] purge over %,d rows, half of them expired ...%n", options.purgeRows());
          purge = PurgeBench.run(database, options.purgeRows());
          report.purge(purge);
        }
      }
    } catch (Exception e) {
      problems.add("The benchmark stopped: " + e);
      e.printStackTrace(progress);
    }
    return finish(out, start, problems, comparison, memory, sweep, purge, crashWindows);
  }

  private static BenchResults finish(
      PrintStream out,
      long start,
      List<String> problems,
      List<VariantSummary> comparison,
      HeapGrowth.@Nullable Result memory,
      List<TableSizeSweep.Point> sweep,
      PurgeBench.@Nullable Result purge,
      List<CrashWindow.Result> crashWindows) {
    String resultLine = Report.resultLine(comparison, memory);
    out.println();
    out.printf(
        "finished in %.0f s%s%n",
        (System.nanoTime() - start) / 1e9,
        problems.isEmpty() ? "" : "; PROBLEMS: " + String.join("; ", problems));
    out.println(resultLine);
    return new BenchResults(
        comparison, memory, sweep, purge, crashWindows, resultLine, List.copyOf(problems));
  }

  private static String postgresql(BenchDatabase database) throws Exception {
    String configured = System.getenv(TestDatabase.URL_VARIABLE);
    String server =
        configured != null && !configured.isBlank()
            ? "the server of " + TestDatabase.URL_VARIABLE
            : "a server started for the run (Testcontainers, or embedded)";
    return database.describeServer()
        + ", "
        + server
        + ", database "
        + database.name()
        + " (dropped at the end)";
  }
}
