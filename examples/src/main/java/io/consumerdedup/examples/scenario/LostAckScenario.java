package io.consumerdedup.examples.scenario;

import io.consumerdedup.examples.DemoContext;
import io.consumerdedup.examples.ledger.Bank;
import io.consumerdedup.examples.ledger.EffectHandler;
import io.consumerdedup.examples.ledger.EffectKind;
import io.consumerdedup.examples.report.RunRow;
import io.consumerdedup.examples.report.ScenarioResult;
import java.util.List;

/**
 * The classic lost ACK: a payment consumer, in a JVM of its own, charges the card (and, with dedup,
 * records SUCCESS), and its process is killed before the offset commit. The restarted consumer gets
 * the record again.
 */
public final class LostAckScenario implements Scenario {
  static final String KEY_HEADER = "order-no";
  private static final String ORDER = "A-0001";

  @Override
  public String id() {
    return "lost-ack";
  }

  @Override
  public ScenarioResult run(DemoContext context) throws Exception {
    return new ScenarioResult(
        "1. Lost ACK: the payment consumer's JVM is killed after charging order "
            + ORDER
            + ", before its offset commit",
        "A deploy, an OOM kill or a node failure between the side effect and the commit: Kafka"
            + " redelivers the record to the restarted consumer.",
        List.of(runOnce(context, false), runOnce(context, true)),
        List.of(
            "with dedup the child recorded SUCCESS before it died, so the restart skips the record",
            "dedup lease in this demo: "
                + context.settings().lease().toSeconds()
                + " s (production: minutes). Had the child died between the charge and SUCCESS,"
                + " the restart would see the key in progress until the lease ran out and then"
                + " charge again: the one window of DedupMode.SEPARATE, which scenario 8 shows,"
                + " with DedupMode.TRANSACTIONAL closing it"));
  }

  private RunRow runOnce(DemoContext context, boolean withDedup) throws Exception {
    try (ScenarioRun run = ScenarioRun.start(context, id(), ScenarioRun.mode(withDedup))) {
      run.ledger().open(EffectKind.CHARGE);
      long last = run.send(KEY_HEADER, ORDER, "confirm payment of 25.00");
      chargeInChildAndKill(run, withDedup);
      run.progress().step("restarting the payment consumer in the same group");
      EffectHandler payments =
          new EffectHandler(
              run.ledger(),
              EffectKind.CHARGE,
              KEY_HEADER,
              Bank.healthy(),
              "billing (restarted)",
              run.stats());
      run.consumer(
              run.setup("billing (restarted)", "billing").build(),
              withDedup,
              "payment",
              KEY_HEADER,
              payments)
          .runUntilCommitted(last + 1, run.settings().runTimeout());
      return run.row(ScenarioRun.label(withDedup), withDedup, EffectKind.CHARGE, 1);
    }
  }

  /** Starts the consumer in a child JVM, waits until it has charged, and kills it. */
  private static void chargeInChildAndKill(ScenarioRun run, boolean withDedup) throws Exception {
    try (ChildJvm child =
        ChildJvm.start(
            LostAckChild.class,
            List.of(
                run.bootstrapServers(),
                run.jdbcUrl(),
                run.topic(),
                run.group("billing"),
                ScenarioRun.mode(withDedup),
                Long.toString(run.settings().lease().toMillis())),
            LostAckChild.CHARGED_LINE,
            run.progress())) {
      run.progress().step("started the payment consumer in a child JVM (pid " + child.pid() + ")");
      String line = child.awaitSignal(run.settings().runTimeout());
      int exitCode = child.kill();
      ChildJvm.addCounts(line, run.stats());
      run.progress()
          .step(
              "child JVM charged "
                  + ORDER
                  + " and was killed before its offset commit (exit code "
                  + exitCode
                  + ")");
    }
  }
}
