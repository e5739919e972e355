package io.consumerdedup.bench;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import org.junit.jupiter.api.Test;

class BenchOptionsTest {

  @Test
  void withoutArgumentsItRunsTheFullWorkload() {
    BenchOptions options = BenchOptions.parse();

    assertThat(options.quick()).isFalse();
    assertThat(options.messages()).isEqualTo(200_000);
    assertThat(options.repetitions()).isEqualTo(3);
    assertThat(options.sweepSizes()).containsExactly(100_000L, 1_000_000L);
    assertThat(options.memoryRecords()).containsExactly(100_000, 1_000_000);
    assertThat(options.purgeRows()).isEqualTo(1_000_000);
  }

  @Test
  void quickAndBigAndOverridesComeAsOneStringAsMavenPassesThem() {
    BenchOptions options = BenchOptions.parse(" --quick  --big --repetitions=1 ", "");

    assertThat(options.quick()).isTrue();
    assertThat(options.messages()).isEqualTo(5_000);
    assertThat(options.repetitions()).isEqualTo(1);
    assertThat(options.sweepSizes()).containsExactly(100_000L, 1_000_000L, 10_000_000L);
    assertThat(options.memoryRecords()).containsExactly(10_000, 100_000);
  }

  @Test
  void theComparisonCanRunSomeVariantsOnlyAndRefusesAnUnknownOne() {
    assertThat(BenchOptions.parse().variants()).isEmpty();
    assertThat(
            Comparison.selected(BenchOptions.parse("--variants=V10,V9").variants()).stream()
                .map(Variant::id))
        .containsExactly("V9", "V10");
    assertThatThrownBy(() -> Comparison.selected(BenchOptions.parse("--variants=V99").variants()))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("V99");
  }

  @Test
  void theSweepAndThePurgeCanBeSkipped() {
    BenchOptions options = BenchOptions.parse("--sweep=none", "--purge-rows=0");

    assertThat(options.sweepSizes()).isEmpty();
    assertThat(options.purgeRows()).isZero();
  }

  @Test
  void theHeapMeasurementTakesTwoRecordCountsOrNone() {
    assertThat(BenchOptions.parse("--memory=none").memoryRecords()).isEmpty();
    assertThat(BenchOptions.parse("--quick --memory=2000,20_000").memoryRecords())
        .containsExactly(2_000, 20_000);
    assertThatThrownBy(() -> BenchOptions.parse("--memory=20000,2000"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("--memory");
    assertThatThrownBy(() -> BenchOptions.parse("--memory=20000"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("--memory");
  }

  @Test
  void theCrashWindowRunGetsEnoughMessagesForItsKills() {
    BenchOptions options = BenchOptions.parse("--crash-window --kills=5");

    assertThat(options.crashWindow()).isTrue();
    assertThat(options.kills()).isEqualTo(5);
    assertThat(options.messages()).isEqualTo(5 * 400);
    assertThat(BenchOptions.parse("--crash-window", "--messages=100").messages()).isEqualTo(100);
    assertThatThrownBy(() -> BenchOptions.parse("--crash-window --kills=0"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("kills");
  }

  @Test
  void anUnknownArgumentIsRefusedWithTheUsage() {
    assertThatThrownBy(() -> BenchOptions.parse("--fast"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("'--fast'")
        .hasMessageContaining("--quick");
    assertThatThrownBy(() -> BenchOptions.parse("--messages=many"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("--messages=many");
  }
}
