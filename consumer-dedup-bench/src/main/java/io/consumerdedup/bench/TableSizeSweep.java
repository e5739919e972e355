package io.consumerdedup.bench;

import io.consumerdedup.bench.BenchDatabase.RelationSize;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * V2's throughput as the dedup table grows: for each size, the table is emptied, preloaded with
 * that many keys by SQL (none of them the workload's), vacuumed, measured on disk, and the workload
 * consumed through V2 once.
 */
final class TableSizeSweep {
  /** Preloaded rows are SUCCESS rows kept for the library's default retention. */
  private static final Duration PRELOADED_RETENTION = Duration.ofDays(7);

  private TableSizeSweep() {}

  /**
   * One size of the sweep.
   *
   * @param preloadedKeys keys in the table when the run started
   * @param size the table's disk use then
   * @param run V2's run over it
   */
  record Point(long preloadedKeys, RelationSize size, VariantRun run) {
    double totalBytesPerMillionKeys() {
      return size.totalBytes() * 1e6 / preloadedKeys;
    }

    double indexBytesPerMillionKeys() {
      return size.indexBytes() * 1e6 / preloadedKeys;
    }
  }

  static List<Point> run(BenchDatabase database, VariantRunner runner, List<Long> sizes)
      throws Exception {
    List<Point> points = new ArrayList<>();
    for (long size : sizes) {
      DedupTable.truncate(database);
      DedupTable.preload(database, size, PRELOADED_RETENTION);
      RelationSize relationSize = database.relationSize(DedupTable.NAME);
      VariantRun run = runner.run(OursLoop.onPreparedTable(), "keys" + size);
      points.add(new Point(size, relationSize, run));
    }
    return points;
  }
}
