package io.consumerdedup.examples;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.examples.ledger.EffectKind;
import io.consumerdedup.examples.report.ReportPrinter;
import io.consumerdedup.examples.report.RunRow;
import io.consumerdedup.examples.report.ScenarioResult;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
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

  /**
   * Two orders, the first charged twice and the second never: as many charges as orders and the
   * balance they make, yet a double charge and a lost order.
   */
  @Test
  void aSecondChargeOfOneOrderDoesNotMakeUpForAnotherOrderNeverCharged() {
    RunRow row =
        new RunRow(
            "with dedup",
            true,
            EffectKind.CHARGE,
            3,
            2,
            2,
            1,
            EffectKind.CHARGE.balanceAfter(2),
            0,
            0,
            0,
            2,
            0);

    assertThat(row.verdict()).isEqualTo(RunRow.Verdict.DOUBLE_EFFECT);
    assertThat(new ScenarioResult("t", "i", List.of(row), List.of()).dedupHeld()).isFalse();
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

  /**
   * Every scenario hands some action to a consumer more than once (a redelivery or a repeated
   * message). A run in which none was, say a lost ACK whose child JVM committed before it was
   * killed, shows one charge per order whether or not dedup works: the report must not call that a
   * success.
   */
  @Test
  void aRunInWhichNothingWasDeliveredTwiceDidNotReproduceItsFaultAndFailsTheDemo() {
    RunRow noRedelivery = delivered(true, 1, 1, 1);
    RunRow noDoubleWithout = delivered(false, 1, 1, 1);
    ScenarioResult result =
        new ScenarioResult("t", "i", List.of(noDoubleWithout, noRedelivery), List.of());

    assertThat(noRedelivery.verdictText())
        .as("a with-dedup run that saw no redelivery")
        .isEqualTo("FAULT NOT REPRODUCED");
    assertThat(noDoubleWithout.verdictText())
        .as("a without-dedup run that saw no redelivery")
        .isEqualTo("FAULT NOT REPRODUCED");
    assertThat(result.passed()).as("the scenario passes the demo").isFalse();
    assertThat(delivered(true, 2, 1, 1).verdict()).isEqualTo(RunRow.Verdict.OK);
  }

  @Test
  void theReportSaysWhichScenarioDidNotReproduceItsFault() {
    ByteArrayOutputStream printed = new ByteArrayOutputStream();
    new ReportPrinter(new PrintStream(printed, true, StandardCharsets.UTF_8))
        .print(
            List.of(
                new ScenarioResult(
                    "1. Lost ACK",
                    "i",
                    List.of(delivered(false, 1, 1, 1), delivered(true, 1, 1, 1)),
                    List.of())));

    assertThat(printed.toString(StandardCharsets.UTF_8))
        .doesNotContain("RESULT: with dedup, every scenario applied")
        .contains("RESULT: FAILED")
        .contains("1. Lost ACK");
  }

  private static RunRow delivered(boolean withDedup, int delivered, int charges, int orders) {
    return new RunRow(
        withDedup ? "with dedup" : "without dedup",
        withDedup,
        EffectKind.CHARGE,
        delivered,
        charges,
        charges,
        Math.min(charges, orders),
        EffectKind.CHARGE.balanceAfter(charges),
        0,
        0,
        0,
        orders,
        0);
  }

  /** A run in which one order was delivered twice, as in every scenario. */
  private static RunRow charges(boolean withDedup, int charges, int orders) {
    return new RunRow(
        withDedup ? "with dedup" : "without dedup",
        withDedup,
        EffectKind.CHARGE,
        orders + 1,
        charges,
        charges,
        Math.min(charges, orders),
        EffectKind.CHARGE.balanceAfter(charges),
        0,
        0,
        0,
        orders,
        0);
  }
}
