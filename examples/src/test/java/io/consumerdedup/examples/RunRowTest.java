package io.consumerdedup.examples;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.examples.ledger.EffectKind;
import io.consumerdedup.examples.report.RunRow;
import io.consumerdedup.examples.report.ScenarioResult;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The verdicts that decide the demo's exit status. */
class RunRowTest {

  @Test
  void moreChargesThanOrdersIsADoubleCharge() {
    RunRow row = charges(true, 2, 1);

    assertThat(row.verdict()).isEqualTo(RunRow.Verdict.DOUBLE_EFFECT);
    assertThat(row.verdictText()).isEqualTo("DOUBLE CHARGE");
  }

  @Test
  void fewerChargesThanOrdersIsALostMessage() {
    assertThat(charges(true, 1, 2).verdict()).isEqualTo(RunRow.Verdict.LOST);
  }

  @Test
  void oneChargePerOrderWithTheMatchingBalanceIsOk() {
    assertThat(charges(true, 2, 2).verdict()).isEqualTo(RunRow.Verdict.OK);
  }

  @Test
  void theExpectedExtraChargeOfTheDocumentedWindowIsNamedAsSuchAndDoesNotFailTheDemo() {
    RunRow window = charges(true, 2, 1).expectingWindowEffects(1);

    assertThat(window.verdict()).isEqualTo(RunRow.Verdict.DOUBLE_EFFECT_IN_WINDOW);
    assertThat(window.verdictText()).isEqualTo("DOUBLE CHARGE (window)");
    ScenarioResult result =
        new ScenarioResult("t", "i", List.of(charges(false, 2, 1), window), List.of());
    assertThat(result.dedupHeld()).isTrue();
    assertThat(result.showsWindow()).isTrue();
  }

  @Test
  void moreChargesThanTheWindowExplainsAreStillADoubleCharge() {
    RunRow beyondWindow = charges(true, 3, 1).expectingWindowEffects(1);

    assertThat(beyondWindow.verdict()).isEqualTo(RunRow.Verdict.DOUBLE_EFFECT);
    assertThat(new ScenarioResult("t", "i", List.of(beyondWindow), List.of()).dedupHeld())
        .isFalse();
  }

  @Test
  void onlyRunsWithDedupDecideWhetherDedupHeld() {
    ScenarioResult doubledWithoutDedup =
        new ScenarioResult("t", "i", List.of(charges(false, 2, 1), charges(true, 1, 1)), List.of());
    ScenarioResult doubledWithDedup =
        new ScenarioResult("t", "i", List.of(charges(false, 2, 1), charges(true, 2, 1)), List.of());

    assertThat(doubledWithoutDedup.dedupHeld()).isTrue();
    assertThat(doubledWithDedup.dedupHeld()).isFalse();
  }

  private static RunRow charges(boolean withDedup, int charges, int orders) {
    return new RunRow(
        withDedup ? "with dedup" : "without dedup",
        withDedup,
        EffectKind.CHARGE,
        charges,
        charges,
        charges,
        EffectKind.CHARGE.balanceAfter(charges),
        0,
        0,
        0,
        orders,
        0);
  }
}
