package io.consumerdedup.examples.scenario;

import io.consumerdedup.examples.DemoContext;
import io.consumerdedup.examples.ledger.Bank;
import io.consumerdedup.examples.ledger.EffectHandler;
import io.consumerdedup.examples.ledger.EffectKind;
import io.consumerdedup.examples.report.RunRow;
import io.consumerdedup.examples.report.ScenarioResult;
import java.util.List;

/**
 * A payment provider pushes its "payment captured" callback until it sees a 200 in time, so the
 * same external transaction id reaches the topic five times.
 */
public final class ProviderCallbackScenario implements Scenario {
  private static final String KEY_HEADER = "provider-txn-id";
  private static final int CALLBACKS = 5;

  @Override
  public String id() {
    return "provider-callbacks";
  }

  @Override
  public ScenarioResult run(DemoContext context) throws Exception {
    return new ScenarioResult(
        "3. Payment provider callbacks: transaction pi_3PmX9c pushed " + CALLBACKS + " times",
        "The provider retries its webhook until it gets a timely 200; each push lands on the topic"
            + " again.",
        List.of(runOnce(context, false), runOnce(context, true)),
        List.of("keyed by the provider's transaction id (header provider-txn-id)"));
  }

  private RunRow runOnce(DemoContext context, boolean withDedup) throws Exception {
    try (ScenarioRun run = ScenarioRun.start(context, id(), ScenarioRun.mode(withDedup))) {
      run.ledger().open(EffectKind.CHARGE);
      long last = -1;
      for (int push = 1; push <= CALLBACKS; push++) {
        last =
            run.send(
                KEY_HEADER,
                "pi_3PmX9c",
                "{\"type\":\"payment.captured\",\"amount\":2500,\"push\":" + push + "}");
      }
      EffectHandler capture =
          new EffectHandler(
              run.ledger(),
              EffectKind.CHARGE,
              KEY_HEADER,
              Bank.healthy(),
              "payment-callbacks",
              run.stats());
      run.consumer(
              run.setup("callbacks", "callbacks").build(),
              withDedup,
              "provider-capture",
              KEY_HEADER,
              capture)
          .runUntilCommitted(last + 1, run.settings().runTimeout());
      return run.row(ScenarioRun.label(withDedup), withDedup, EffectKind.CHARGE, 1);
    }
  }
}
