package io.consumerdedup.bench;

import io.consumerdedup.bench.BenchDatabase.TableActivity;
import io.consumerdedup.bench.Variant.HandlerRuns;
import java.util.ArrayList;
import java.util.List;
import java.util.OptionalLong;
import org.HdrHistogram.Histogram;

/**
 * What one run of one variant measured.
 *
 * @param variantId the variant's id
 * @param runName which run it was, such as {@code r2}
 * @param workload the messages it consumed
 * @param expected how often the handler had to run
 * @param done records done (handled or skipped as duplicates)
 * @param deadLettered records given up on (none, in a sound run)
 * @param handlerRuns runs of the handler
 * @param distinctKeysApplied distinct business keys the handler applied
 * @param elapsedNanos from the first poll that returned records to the last record done
 * @param latencyMicros per record, from the return of its poll to its end
 * @param commitSyncs the consumer's {@code commitSync} calls
 * @param databaseCommits transactions committed in the benchmark database during the run
 * @param cpuNanos CPU time of this JVM over {@code elapsedNanos}
 * @param dedupTableActivity updates of consumer-dedup's table during the run
 * @param keysRecorded the workload's keys the variant's store held as done once the run ended
 *     (empty: no store)
 */
public record VariantRun(
    String variantId,
    String runName,
    Workload workload,
    HandlerRuns expected,
    long done,
    long deadLettered,
    long handlerRuns,
    int distinctKeysApplied,
    long elapsedNanos,
    Histogram latencyMicros,
    long commitSyncs,
    long databaseCommits,
    long cpuNanos,
    TableActivity dedupTableActivity,
    OptionalLong keysRecorded) {

  /** Records done per second. */
  public double messagesPerSecond() {
    return done * 1e9 / elapsedNanos;
  }

  /** Median latency per record, in milliseconds. */
  public double p50Millis() {
    return latencyMicros.getValueAtPercentile(50) / 1e3;
  }

  /** 99th percentile latency per record, in milliseconds. */
  public double p99Millis() {
    return latencyMicros.getValueAtPercentile(99) / 1e3;
  }

  /** The consumer's {@code commitSync} calls per message. */
  public double commitSyncsPerMessage() {
    return (double) commitSyncs / workload.messages();
  }

  /** Database transactions committed per message. */
  public double databaseCommitsPerMessage() {
    return (double) databaseCommits / workload.messages();
  }

  /** CPU seconds of this JVM over the measured window. */
  public double cpuSeconds() {
    return cpuNanos / 1e9;
  }

  /** What went wrong in the run: empty when it consumed every message and applied as expected. */
  public List<String> problems() {
    List<String> problems = new ArrayList<>();
    String run = variantId + " " + runName + ": ";
    if (done != workload.messages()) {
      problems.add(run + "consumed " + done + " of " + workload.messages() + " messages");
    }
    if (deadLettered > 0) {
      problems.add(run + deadLettered + " messages were dead-lettered");
    }
    long expectedRuns = expected.over(workload);
    if (handlerRuns != expectedRuns) {
      problems.add(run + "the handler ran " + handlerRuns + " times, not " + expectedRuns);
    }
    int expectedKeys = expectedRuns == 0 ? 0 : workload.distinctKeys();
    if (distinctKeysApplied != expectedKeys) {
      problems.add(run + "applied " + distinctKeysApplied + " distinct keys, not " + expectedKeys);
    }
    if (keysRecorded.isPresent() && keysRecorded.getAsLong() != workload.distinctKeys()) {
      problems.add(
          run
              + "its store held "
              + keysRecorded.getAsLong()
              + " keys as done (SUCCESS) once the run ended, not "
              + workload.distinctKeys());
    }
    return problems;
  }
}
