package io.consumerdedup.examples.scenario;

import io.consumerdedup.examples.DemoContext;
import io.consumerdedup.examples.ledger.Bank;
import io.consumerdedup.examples.ledger.EffectHandler;
import io.consumerdedup.examples.ledger.EffectKind;
import io.consumerdedup.examples.report.RunRow;
import io.consumerdedup.examples.report.ScenarioResult;
import java.util.List;

/**
 * The user clicks "confirm payment" twice, or the producer retries a send whose ack it missed: the
 * same order arrives twice, at different offsets. Deduplicating by offset would not catch it; the
 * order number in the {@code order-no} header does.
 */
public final class ProducerRetryScenario implements Scenario {
  private static final String KEY_HEADER = "order-no";

  @Override
  public String id() {
    return "producer-retry";
  }

  @Override
  public ScenarioResult run(DemoContext context) throws Exception {
    return new ScenarioResult(
        "2. Impatient user / producer retry: \"confirm payment\" for order A-1001 arrives twice",
        "The user double-clicks, or the producer retries a send whose ack it missed: the same order"
            + " number, two offsets.",
        List.of(runOnce(context, false), runOnce(context, true)),
        List.of(
            "dedup by offset (KeyExtractors.coordinates()) would not catch this; the order-no"
                + " header does"));
  }

  private RunRow runOnce(DemoContext context, boolean withDedup) throws Exception {
    try (ScenarioRun run = ScenarioRun.start(context, id(), ScenarioRun.mode(withDedup))) {
      run.ledger().open(EffectKind.CHARGE);
      run.send(KEY_HEADER, "A-1001", "confirm payment of 25.00");
      run.send(KEY_HEADER, "A-1001", "confirm payment of 25.00 (clicked again)");
      long last = run.send(KEY_HEADER, "A-1002", "confirm payment of 25.00");
      EffectHandler payments =
          new EffectHandler(
              run.ledger(), EffectKind.CHARGE, KEY_HEADER, Bank.healthy(), "billing", run.stats());
      run.consumer(
              run.setup("billing", "billing").build(), withDedup, "payment", KEY_HEADER, payments)
          .runUntilCommitted(last + 1, run.settings().runTimeout());
      return run.row(ScenarioRun.label(withDedup), withDedup, EffectKind.CHARGE, 2);
    }
  }
}
