package io.consumerdedup.examples.scenario;

import io.consumerdedup.examples.DemoContext;
import io.consumerdedup.examples.ledger.Bank;
import io.consumerdedup.examples.ledger.EffectHandler;
import io.consumerdedup.examples.ledger.EffectKind;
import io.consumerdedup.examples.report.RunRow;
import io.consumerdedup.examples.report.RunStats;
import io.consumerdedup.examples.report.ScenarioResult;
import java.util.ArrayList;
import java.util.List;

/**
 * One payment event feeds two services, each in its own consumer group: points and coupons. Both
 * keep their records in one dedup table; the biz type ({@code points}, {@code coupon}) keeps them
 * apart, so each applies each payment once and neither mistakes the other's record for its own.
 */
public final class FanOutScenario implements Scenario {
  private static final String KEY_HEADER = "order-no";

  @Override
  public String id() {
    return "fan-out";
  }

  @Override
  public ScenarioResult run(DemoContext context) throws Exception {
    List<RunRow> rows = new ArrayList<>(runOnce(context, false));
    rows.addAll(runOnce(context, true));
    return new ScenarioResult(
        "6. Fan-out: payments A-4001 (sent twice) and A-4002 feed a points and a coupon service",
        "Two services consume one payment event; a redelivered payment must award points once and"
            + " issue one coupon, and one service's record must not hide the payment from the"
            + " other.",
        rows,
        List.of(
            "one dedup table, two biz types: had both services used biz type 'payment', the"
                + " second would skip every payment as the first one's duplicate (LOST)"));
  }

  private List<RunRow> runOnce(DemoContext context, boolean withDedup) throws Exception {
    try (ScenarioRun run = ScenarioRun.start(context, id(), ScenarioRun.mode(withDedup))) {
      run.ledger().open(EffectKind.POINTS);
      run.ledger().open(EffectKind.COUPON);
      run.send(KEY_HEADER, "A-4001", "payment of 25.00 captured");
      run.send(KEY_HEADER, "A-4001", "payment of 25.00 captured (producer retry)");
      long last = run.send(KEY_HEADER, "A-4002", "payment of 25.00 captured");
      RunStats points = new RunStats();
      RunStats coupons = new RunStats();
      consume(run, withDedup, "points-service", "points", EffectKind.POINTS, points, last + 1);
      consume(run, withDedup, "coupon-service", "coupon", EffectKind.COUPON, coupons, last + 1);
      String label = ScenarioRun.label(withDedup);
      return List.of(
          run.row("points, " + label, withDedup, EffectKind.POINTS, points, 2),
          run.row("coupons, " + label, withDedup, EffectKind.COUPON, coupons, 2));
    }
  }

  private static void consume(
      ScenarioRun run,
      boolean withDedup,
      String service,
      String bizType,
      EffectKind kind,
      RunStats stats,
      long endOffset)
      throws InterruptedException {
    EffectHandler handler =
        new EffectHandler(run.ledger(), kind, KEY_HEADER, Bank.healthy(), service, stats);
    run.consumer(
            run.setup(service, service).stats(stats).build(),
            withDedup,
            bizType,
            KEY_HEADER,
            handler)
        .runUntilCommitted(endOffset, run.settings().runTimeout());
  }
}
