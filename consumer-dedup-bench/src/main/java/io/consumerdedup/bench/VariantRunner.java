package io.consumerdedup.bench;

import io.consumerdedup.bench.BenchDatabase.TableActivity;
import java.io.PrintStream;
import java.time.Duration;
import java.util.HexFormat;
import java.util.concurrent.ThreadLocalRandom;

/**
 * Runs a variant once over the workload, in a consumer group of its own, and gathers what it
 * measured: the probe's numbers, the handler's effects, and the database's commits and the dedup
 * table's updates over the run (read once the run's sessions have ended).
 */
final class VariantRunner {
  /** Time allowed to a run: generous, so that only a stuck run fails by it. */
  private static final Duration BASE_TIMEOUT = Duration.ofMinutes(2);

  private static final Duration TIMEOUT_PER_MESSAGE = Duration.ofMillis(20);

  private final BenchDatabase database;
  private final BenchBroker broker;
  private final Workload workload;
  private final PrintStream progress;

  VariantRunner(
      BenchDatabase database, BenchBroker broker, Workload workload, PrintStream progress) {
    this.database = database;
    this.broker = broker;
    this.workload = workload;
    this.progress = progress;
  }

  Workload workload() {
    return workload;
  }

  /** Prepares the tables, runs the variant, and returns what the run measured. */
  VariantRun run(Variant variant, String runName) throws Exception {
    variant.prepare(database);
    TableActivity activityBefore = database.tableActivity(DedupTable.NAME);
    long commitsBefore = database.committedTransactions();
    Probe probe = new Probe(workload.messages());
    HandlerEffects effects = new HandlerEffects();
    String groupId =
        variant.id()
            + "-"
            + runName
            + "-"
            + HexFormat.of().toHexDigits(ThreadLocalRandom.current().nextInt());
    Duration timeout = BASE_TIMEOUT.plus(TIMEOUT_PER_MESSAGE.multipliedBy(workload.messages()));
    try (RunContext context =
        new RunContext(workload, broker, groupId, probe, effects, database, timeout)) {
      variant.consume(context);
    }
    long commitsAfter = database.committedTransactions();
    TableActivity activityAfter = database.tableActivity(DedupTable.NAME);
    VariantRun run =
        new VariantRun(
            variant.id(),
            runName,
            workload,
            variant.expectedHandlerRuns(),
            probe.done(),
            probe.deadLettered(),
            effects.runs(),
            effects.distinctKeys(),
            probe.elapsedNanos(),
            probe.latencyMicros(),
            probe.commitSyncs(),
            commitsAfter - commitsBefore,
            probe.cpuNanos(),
            activityAfter.since(activityBefore),
            variant.keysRecorded(database));
    progress.printf(
        "[bench] %s %s: %,.0f msg/s (%,d messages in %.1f s)%n",
        variant.id(), runName, run.messagesPerSecond(), run.done(), run.elapsedNanos() / 1e9);
    if (probe.firstDeadLetterReason() != null) {
      probe.firstDeadLetterReason().printStackTrace(progress);
    }
    return run;
  }
}
