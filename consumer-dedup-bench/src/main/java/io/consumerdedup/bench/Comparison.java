package io.consumerdedup.bench;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The main comparison: every measured variant over the same messages, in interleaved repetitions
 * (V0, V1, V6, V2, V5, V3, V4, V7, V8, V9, V10, V11, then again), so that a slow moment of the
 * machine does not fall on one variant only; the report gives medians. A warm-up pass over other
 * messages comes first, so that the first repetition does not pay for the JIT compiler and the
 * first connections alone; after it the dedup table, holding the warm-up's keys, is analyzed once.
 */
final class Comparison {
  private Comparison() {}

  /**
   * The variants measured, in the order each repetition runs them: V6 right after V1, on the table
   * V1 filled.
   */
  static List<Variant> measured() {
    return List.of(
        new PlainConsumer(),
        OursLoop.newKeys(),
        OursLoop.duplicatesOnly(),
        OursLoop.batched(),
        new OursTransactional(),
        new CamelJdbcRepository(),
        new SpringIntegrationMetadataStore(),
        SpringRecordListener.idempotent(),
        SpringRecordListener.plain(),
        ShareQueue.plain(),
        ShareQueue.idempotent(),
        new SpringShareListener());
  }

  /**
   * The measured variants whose ids are in {@code ids}, in their order; all of them when {@code
   * ids} is empty.
   *
   * @throws IllegalArgumentException naming an id that is no variant
   */
  static List<Variant> selected(List<String> ids) {
    List<Variant> all = measured();
    List<String> known = all.stream().map(Variant::id).toList();
    List<String> unknown = ids.stream().filter(id -> !known.contains(id)).toList();
    if (!unknown.isEmpty()) {
      throw new IllegalArgumentException(
          "--variants names no variant " + unknown + "; the variants are " + known);
    }
    return ids.isEmpty() ? all : all.stream().filter(v -> ids.contains(v.id())).toList();
  }

  /**
   * Creates the variants' tables, runs each variant once with {@code warmUp} (not reported), then
   * {@code repetitions} rounds of the variants with {@code runner}; returns their runs in that
   * order.
   */
  static List<VariantSummary> run(
      List<Variant> variants,
      VariantRunner runner,
      VariantRunner warmUp,
      BenchDatabase database,
      int repetitions)
      throws Exception {
    for (Variant variant : variants) {
      variant.createTables(database);
    }
    for (Variant variant : variants) {
      warmUp.run(variant, "warm-up");
    }
    DedupTable.analyze(database);
    Map<Variant, List<VariantRun>> runs = new LinkedHashMap<>();
    for (int repetition = 1; repetition <= repetitions; repetition++) {
      for (Variant variant : variants) {
        runs.computeIfAbsent(variant, v -> new ArrayList<>())
            .add(runner.run(variant, "r" + repetition));
      }
    }
    return runs.entrySet().stream()
        .map(entry -> new VariantSummary(entry.getKey(), List.copyOf(entry.getValue())))
        .toList();
  }
}
