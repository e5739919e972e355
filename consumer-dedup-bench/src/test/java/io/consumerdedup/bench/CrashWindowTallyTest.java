package io.consumerdedup.bench;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.testing.TestDatabase;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The crash window's end check counts effects per key, not only in total. */
class CrashWindowTallyTest {

  @Test
  void aKeyRunAgainAfterAKillIsConsistentWhenTheKillCountedIt() throws Exception {
    try (BenchDatabase database = BenchDatabase.create(TestDatabase.baseUrl())) {
      CrashWindow.emptyTables(database);
      DedupTable.preload(database, 2, Duration.ofDays(7));
      database.update(
          "INSERT INTO crash_effects (order_no)"
              + " VALUES ('preloaded-1'), ('preloaded-1'), ('preloaded-2')");

      CrashWindow.Result result =
          CrashWindow.tally(database, "per record", List.of(1), new Workload("t", 1, 3, 2, 100));

      assertThat(result.consistent()).isTrue();
    }
  }

  /**
   * Two keys, both SUCCESS, the first applied twice and the second never, no re-run counted at the
   * kills: one effect per key in total, yet a double effect and a lost one.
   */
  @Test
  void aSecondEffectOfOneKeyDoesNotMakeUpForAKeyNeverApplied() throws Exception {
    try (BenchDatabase database = BenchDatabase.create(TestDatabase.baseUrl())) {
      CrashWindow.emptyTables(database);
      DedupTable.preload(database, 2, Duration.ofDays(7));
      database.update(
          "INSERT INTO crash_effects (order_no) VALUES ('preloaded-1'), ('preloaded-1')");

      CrashWindow.Result result =
          CrashWindow.tally(database, "per record", List.of(0), new Workload("t", 1, 2, 2, 100));

      assertThat(result.consistent()).as("the path is reported consistent").isFalse();
    }
  }
}
