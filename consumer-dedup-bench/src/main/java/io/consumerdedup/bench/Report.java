package io.consumerdedup.bench;

import io.consumerdedup.bench.BenchDatabase.TableActivity;
import io.consumerdedup.jdbc.DedupJanitor;
import java.io.PrintStream;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalDouble;
import java.util.stream.Collectors;
import org.HdrHistogram.Histogram;
import org.jspecify.annotations.Nullable;

/** Writes the benchmark's report: the set-up, the tables, and the closing {@code RESULT} line. */
final class Report {
  private static final String ROW = "%-3s %-36s %9s %8s %8s %8s %8s %10s %10s %7s %8s%n";

  private final PrintStream out;

  Report(PrintStream out) {
    this.out = out;
  }

  void setUp(
      BenchOptions options,
      Machine machine,
      String postgresql,
      String kafkaVersion,
      Workload workload,
      Workload warmUp) {
    out.println("consumer-dedup benchmark");
    out.printf(
        "arguments   %s: %,d messages, %d repetition(s), memory %s, sweep %s, purge %s%n",
        options.quick() ? "--quick" : "full",
        options.messages(),
        options.repetitions(),
        options.memoryRecords().isEmpty()
            ? "skipped"
            : String.format(
                    "%,d / %,d", options.memoryRecords().get(0), options.memoryRecords().get(1))
                + " records",
        options.sweepSizes().isEmpty()
            ? "skipped"
            : options.sweepSizes().stream()
                    .map(size -> String.format("%,d", size))
                    .collect(Collectors.joining(" / "))
                + " keys",
        options.purgeRows() == 0 ? "skipped" : String.format("%,d rows", options.purgeRows()));
    out.printf(
        "machine     %d cores (%s), %s, %s, %s; load average %s at the start%n",
        machine.cores(),
        machine.cpuModel(),
        machine.memory(),
        machine.system(),
        machine.java(),
        machine.loadAverage());
    out.printf("postgresql  %s%n", postgresql);
    out.printf("kafka       %s, one in-JVM KRaft broker (Kafka's test kit)%n", kafkaVersion);
    out.printf(
        "workload    %,d messages of %d bytes on %d partitions; %,d of them repeat an earlier"
            + " order-no (%.1f %%): %,d distinct keys%n",
        workload.messages(),
        workload.valueBytes(),
        workload.partitions(),
        workload.duplicates(),
        100.0 * workload.duplicates() / workload.messages(),
        workload.distinctKeys());
    out.printf(
        "warm-up     each variant once over %,d other messages first, not reported%n",
        warmUp.messages());
    out.println(
        "            ours = consumer-dedup (DedupPollLoop + IdempotentRecordHandler +"
            + " JdbcDedupStore on HikariCP)");
    out.println(
        "            V7, V8 = a Spring Boot application, one @KafkaListener method taking one"
            + " record, at Boot's and consumer-dedup's defaults");
    out.println(
        "            V9, V10 = one share consumer of a share group (Kafka queues): plain, and"
            + " through DedupShareLoop");
    out.println(
        "            V11 = a Spring Boot application, one @Idempotent @KafkaListener method of a"
            + " share container (one consumer), at Boot's and consumer-dedup's defaults");
  }

  void comparison(List<VariantSummary> summaries, int repetitions) {
    out.println();
    out.printf(
        "Throughput and cost per message: medians of %d interleaved repetition(s), a fresh"
            + " consumer group per run%n",
        repetitions);
    out.printf(
        ROW,
        "id",
        "variant",
        "msg/s",
        "p50 ms",
        "p99 ms",
        "+p50 ms",
        "+p99 ms",
        "commitSync",
        "db commits",
        "CPU s",
        "CPU us");
    out.printf(ROW, "", "", "", "", "", "", "", "per msg", "per msg", "", "per msg");
    Optional<VariantSummary> plain = byId(summaries, "V0");
    double plainP50 = plain.map(s -> s.median(VariantRun::p50Millis)).orElse(Double.NaN);
    double plainP99 = plain.map(s -> s.median(VariantRun::p99Millis)).orElse(Double.NaN);
    summaries.stream()
        .sorted(Comparator.comparing(s -> s.variant().id()))
        .forEach(summary -> printMeasured(summary, plainP50, plainP99));
    out.println();
    out.println(
        "msg/s by run:  "
            + summaries.stream()
                .map(
                    s ->
                        s.variant().id()
                            + " "
                            + s.runs().stream()
                                .map(run -> String.format("%,.0f", run.messagesPerSecond()))
                                .collect(Collectors.joining(" ")))
                .collect(Collectors.joining(" | ")));
    for (String id : List.of("V1", "V2", "V7")) {
      byId(summaries, id)
          .ifPresent(
              summary ->
                  out.println(
                      "HOT updates of consumer_dedup in the "
                          + id
                          + " runs: "
                          + hotUpdates(summary.dedupTableActivity())));
    }
    out.println(
        "msg/s: messages / time from the first poll that returned records to the last record"
            + " done (group join excluded).");
    out.println(
        "p50/p99: per record, from the return of its poll to the end of its handling"
            + " (HdrHistogram); +p50/+p99: minus V0's.");
    out.println(
        "commitSync: the consumer's commitSync calls; db commits: pg_stat_database.xact_commit of"
            + " the benchmark's database over the run.");
    out.println(
        "CPU: this JVM's CPU time (consumer, in-JVM broker, harness; not PostgreSQL's) over the"
            + " msg/s window.");
  }

  private void printMeasured(VariantSummary summary, double plainP50, double plainP99) {
    double p50 = summary.median(VariantRun::p50Millis);
    double p99 = summary.median(VariantRun::p99Millis);
    out.printf(
        ROW,
        summary.variant().id(),
        summary.variant().title(),
        String.format("%,.0f", summary.messagesPerSecond()),
        String.format("%.1f", p50),
        String.format("%.1f", p99),
        String.format("%+.1f", p50 - plainP50),
        String.format("%+.1f", p99 - plainP99),
        String.format("%.4f", summary.median(VariantRun::commitSyncsPerMessage)),
        String.format("%.3f", summary.median(VariantRun::databaseCommitsPerMessage)),
        String.format("%.1f", summary.median(VariantRun::cpuSeconds)),
        String.format("%.0f", summary.median(Report::cpuMicrosPerMessage)));
  }

  void crashWindows(List<CrashWindow.Result> windows) {
    out.println();
    out.println(
        "Crash window of mode SEPARATE: consumers in child JVMs killed (SIGKILL) at random moments;"
            + " at each kill, the records whose effect was applied but whose SUCCESS was not written"
            + " (their handler runs again after the takeover)");
    out.printf(
        "%-26s %6s %14s %14s %10s %s%n",
        "path", "kills", "mean per kill", "max per kill", "total", "per kill");
    for (CrashWindow.Result window : windows) {
      out.printf(
          "%-26s %6d %14.1f %14d %10d %s%n",
          window.path(),
          window.rerunsPerKill().size(),
          window.mean(),
          window.max(),
          window.sum(),
          window.rerunsPerKill());
      out.printf(
          "  check: %d effect(s) beyond one per key at the end, %d key(s) not SUCCESS, %d key(s)"
              + " never applied: %s%n",
          window.extraEffects(),
          window.keysNotSuccess(),
          window.keysNotApplied(),
          window.consistent() ? "consistent" : "INCONSISTENT");
    }
  }

  void checks(List<String> problems, List<VariantSummary> summaries) {
    if (problems.isEmpty()) {
      out.printf(
          "checks: passed: every run of %s consumed every message; the handler ran for every"
              + " message in %s, once per distinct key in %s, never in %s; every store held each"
              + " key as done at the end%n",
          summaries.stream().map(s -> s.variant().id()).collect(Collectors.joining(", ")),
          idsExpecting(summaries, Variant.HandlerRuns.EVERY_MESSAGE),
          idsExpecting(summaries, Variant.HandlerRuns.EACH_KEY_ONCE),
          idsExpecting(summaries, Variant.HandlerRuns.NEVER));
    } else {
      out.println("checks: FAILED");
      problems.forEach(problem -> out.println("  " + problem));
    }
  }

  /** The ids of the variants whose handler runs {@code expected}: "V1, V2 and V5", or "none". */
  private static String idsExpecting(List<VariantSummary> summaries, Variant.HandlerRuns expected) {
    List<String> ids =
        summaries.stream()
            .map(VariantSummary::variant)
            .filter(variant -> variant.expectedHandlerRuns() == expected)
            .map(Variant::id)
            .sorted()
            .toList();
    return switch (ids.size()) {
      case 0 -> "none";
      case 1 -> ids.get(0);
      default ->
          String.join(", ", ids.subList(0, ids.size() - 1)) + " and " + ids.get(ids.size() - 1);
    };
  }

  void memory(HeapGrowth.Result result) {
    out.println();
    out.printf(
        "Memory: V7's application (a Spring Boot @Idempotent record listener at the defaults) over"
            + " one run of %,d messages, sent at most %,d ahead of it; heap used after a full GC"
            + " (MemoryMXBean.gc()) when %,d and when all %,d records were done%n",
        result.larger(), HeapGrowth.MAX_AHEAD, result.smaller(), result.larger());
    out.printf(
        "heap        %.1f MB after %,d records, %.1f MB after %,d: heap_growth %.2f (%+.1f MB, %.1f"
            + " bytes per record in between); listener %,.0f msg/s%n",
        result.heapAtSmaller() / 1e6,
        result.smaller(),
        result.heapAtLarger() / 1e6,
        result.larger(),
        result.growth(),
        (result.heapAtLarger() - result.heapAtSmaller()) / 1e6,
        result.bytesPerRecord(),
        result.messagesPerSecond());
    out.println(
        "heap used includes the in-JVM broker and what the comparison left; the producer and the"
            + " handler keep no state that grows with the records.");
    if (result.problems().isEmpty()) {
      out.println("check: passed: every message consumed, the handler ran once per distinct key");
    } else {
      out.println("check: FAILED");
      result.problems().forEach(problem -> out.println("  " + problem));
    }
  }

  void sweep(List<TableSizeSweep.Point> points) {
    out.println();
    out.println(
        "Table size: V2 over the dedup table preloaded with N keys by SQL (one run per size)");
    String row = "%12s %9s %9s %14s %14s %14s  %s%n";
    out.printf(
        row, "keys", "msg/s", "vs first", "table+index MB", "MB / 1M keys", "index MB / 1M", "HOT");
    double first = points.isEmpty() ? Double.NaN : points.get(0).run().messagesPerSecond();
    for (TableSizeSweep.Point point : points) {
      out.printf(
          row,
          String.format("%,d", point.preloadedKeys()),
          String.format("%,.0f", point.run().messagesPerSecond()),
          String.format("%.2f", point.run().messagesPerSecond() / first),
          String.format("%.1f", point.size().totalBytes() / 1e6),
          String.format("%.1f", point.totalBytesPerMillionKeys() / 1e6),
          String.format("%.1f", point.indexBytesPerMillionKeys() / 1e6),
          hotUpdates(point.run().dedupTableActivity()));
    }
    out.println(
        "MB / 1M keys: pg_total_relation_size (heap, TOAST, indexes) and pg_indexes_size per"
            + " million keys, before the run; HOT: n_tup_hot_upd of n_tup_upd during the run.");
  }

  void purge(PurgeBench.Result result) {
    out.println();
    out.printf(
        "Purge: DedupJanitor.purgeExpired() with its defaults (batches of %,d, %d per run, runs"
            + " of at most %d s) over %,d rows created over two weeks, %,d of them expired, run"
            + " after run until one is caught up, while claims of new keys run on another"
            + " connection%n",
        DedupJanitor.DEFAULT_BATCH_SIZE,
        DedupJanitor.DEFAULT_MAX_BATCHES_PER_RUN,
        DedupJanitor.DEFAULT_MAX_RUN_TIME.toSeconds(),
        result.tableRows(),
        result.expiredRows());
    out.printf(
        "purge       deleted %,d rows in %.1f s: %,.0f rows/s; first run %,.0f rows/s, first run"
            + " after %,d deleted %,.0f rows/s (%.0f %% of the first); last run (caught up)"
            + " %.2f s%n",
        result.deleted(),
        result.purgeNanos() / 1e9,
        result.rowsPerSecond(),
        result.startRowsPerSecond(),
        PurgeBench.SUSTAINED_AFTER,
        result.sustainedRowsPerSecond(),
        100 * result.sustainedRowsPerSecond() / result.startRowsPerSecond(),
        result.caughtUpNanos() / 1e9);
    StringBuilder perRun = new StringBuilder("runs        rows/s:");
    result.runs().forEach(run -> perRun.append(String.format(" %,.0f", run.rowsPerSecond())));
    out.println(perRun);
    out.printf(
        "claims      alone: %s; during the purge: %s%n",
        latencies(result.claimsAlone()), latencies(result.claimsDuringPurge()));
  }

  /**
   * The closing line: ratios of the median msg/s of the variants, and the heap's growth, {@code
   * n/a} where one is not measured or its run failed its checks.
   */
  static String resultLine(List<VariantSummary> summaries, HeapGrowth.@Nullable Result memory) {
    // A variant that skipped work or did some twice was not measured doing the workload.
    Map<String, Double> perSecond =
        summaries.stream()
            .filter(VariantSummary::passed)
            .collect(Collectors.toMap(s -> s.variant().id(), VariantSummary::messagesPerSecond));
    return "RESULT"
        + ratio("batched_over_per_record", perSecond, "V2", "V1")
        + ratio("batched_over_camel", perSecond, "V2", "V3")
        + ratio("batched_over_spring_integration", perSecond, "V2", "V4")
        + ratio("batched_over_plain", perSecond, "V2", "V0")
        + ratio("per_record_over_camel", perSecond, "V1", "V3")
        + ratio("duplicates_over_per_record", perSecond, "V6", "V1")
        + ratio("transactional_over_camel", perSecond, "V5", "V3")
        + ratio("spring_record_over_camel", perSecond, "V7", "V3")
        + ratio("spring_record_over_plain_spring", perSecond, "V7", "V8")
        + ratio("share_over_plain_share", perSecond, "V10", "V9")
        + ratio("spring_share_over_plain_share", perSecond, "V11", "V9")
        + field(
            "heap_growth",
            memory == null || !memory.problems().isEmpty()
                ? OptionalDouble.empty()
                : OptionalDouble.of(memory.growth()));
  }

  private static String ratio(
      String name, Map<String, Double> perSecond, String numerator, String denominator) {
    OptionalDouble value =
        perSecond.containsKey(numerator) && perSecond.containsKey(denominator)
            ? OptionalDouble.of(perSecond.get(numerator) / perSecond.get(denominator))
            : OptionalDouble.empty();
    return field(name, value);
  }

  private static String field(String name, OptionalDouble value) {
    return " "
        + name
        + "="
        + (value.isPresent() ? String.format(Locale.ROOT, "%.2f", value.getAsDouble()) : "n/a");
  }

  private static Optional<VariantSummary> byId(List<VariantSummary> summaries, String id) {
    return summaries.stream().filter(s -> s.variant().id().equals(id)).findFirst();
  }

  private static double cpuMicrosPerMessage(VariantRun run) {
    return run.cpuNanos() / 1e3 / run.done();
  }

  private static String hotUpdates(TableActivity activity) {
    return String.format(
        "%,d of %,d updates (%.1f %%)",
        activity.hotUpdates(),
        activity.updates(),
        activity.updates() == 0 ? 0.0 : 100.0 * activity.hotUpdates() / activity.updates());
  }

  private static String latencies(Histogram micros) {
    return String.format(
        "p50 %.2f ms, p99 %.2f ms (%,d claims)",
        micros.getValueAtPercentile(50) / 1e3,
        micros.getValueAtPercentile(99) / 1e3,
        micros.getTotalCount());
  }
}
