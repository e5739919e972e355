package io.consumerdedup.examples.scenario;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.examples.DemoContext;
import io.consumerdedup.examples.ledger.Bank;
import io.consumerdedup.examples.ledger.EffectHandler;
import io.consumerdedup.examples.ledger.EffectKind;
import io.consumerdedup.examples.report.RunRow;
import io.consumerdedup.examples.report.ScenarioResult;
import io.consumerdedup.jdbc.JdbcDedupStore;
import java.util.ArrayList;
import java.util.List;

/**
 * The bank call times out once, before anything is charged: the handler throws, the record is
 * marked FAILED and delivered again, and the retry charges. Dedup must not mistake the failed
 * attempt for a done one (a naive "seen it" table would drop the payment).
 */
public final class BankTimeoutScenario implements Scenario {
  private static final String KEY_HEADER = "order-no";
  private static final String ORDER = "A-3001";

  @Override
  public String id() {
    return "bank-timeout";
  }

  @Override
  public ScenarioResult run(DemoContext context) throws Exception {
    List<String> notes = new ArrayList<>();
    List<RunRow> rows = List.of(runOnce(context, false, notes), runOnce(context, true, notes));
    notes.add(
        "nothing goes wrong without dedup here either: the point is that dedup retries a FAILED"
            + " key instead of skipping it, so the payment is not lost");
    return new ScenarioResult(
        "4. Handler fails mid-way: the bank call for order " + ORDER + " times out once",
        "A downstream timeout makes the handler throw; the record must be retried and charged"
            + " once, neither lost nor doubled.",
        rows,
        notes);
  }

  private RunRow runOnce(DemoContext context, boolean withDedup, List<String> notes)
      throws Exception {
    try (ScenarioRun run = ScenarioRun.start(context, id(), ScenarioRun.mode(withDedup))) {
      run.ledger().open(EffectKind.CHARGE);
      long last = run.send(KEY_HEADER, ORDER, "confirm payment of 25.00");
      EffectHandler payments =
          new EffectHandler(
              run.ledger(),
              EffectKind.CHARGE,
              KEY_HEADER,
              Bank.timingOutFirst(1),
              "billing",
              run.stats());
      run.consumer(
              run.setup("billing", "billing").build(), withDedup, "payment", KEY_HEADER, payments)
          .runUntilCommitted(last + 1, run.settings().runTimeout());
      if (withDedup) {
        DedupRecord record =
            JdbcDedupStore.builder(run.dataSource())
                .build()
                .find(DedupKey.of("payment", ORDER))
                .orElseThrow(() -> new IllegalStateException("No dedup record for " + ORDER));
        notes.add(
            "dedup record payment/"
                + ORDER
                + ": "
                + record.status()
                + " on attempt "
                + record.attempts()
                + " (attempt 1 was marked FAILED, then retried)");
      }
      return run.row(ScenarioRun.label(withDedup), withDedup, EffectKind.CHARGE, 1);
    }
  }
}
