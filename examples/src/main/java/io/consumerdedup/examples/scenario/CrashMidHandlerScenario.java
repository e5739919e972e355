package io.consumerdedup.examples.scenario;

import static io.consumerdedup.examples.scenario.CrashMidHandlerConsumer.BIZ_TYPE;
import static io.consumerdedup.examples.scenario.CrashMidHandlerConsumer.KEY_HEADER;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.examples.DemoContext;
import io.consumerdedup.examples.kafka.ScenarioConsumer;
import io.consumerdedup.examples.ledger.EffectKind;
import io.consumerdedup.examples.report.RunRow;
import io.consumerdedup.examples.report.ScenarioResult;
import io.consumerdedup.examples.scenario.CrashMidHandlerConsumer.Protection;
import io.consumerdedup.jdbc.JdbcDedupStore;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.StringJoiner;

/**
 * The window of {@code DedupMode.SEPARATE}, and how {@code DedupMode.TRANSACTIONAL} closes it: a
 * payment consumer, in a JVM of its own, books the charge and is killed inside its handler, before
 * anything else happens (no SUCCESS, no commit of its transaction, no offset commit). The restarted
 * consumer gets the record again.
 *
 * <p>Without dedup it charges again. With dedup in mode SEPARATE the charge had committed on its
 * own and the key is PROCESSING under the dead child's lease: the restart is told "in progress"
 * until the lease runs out, then takes the key over and charges again, as the library documents. In
 * mode TRANSACTIONAL the dedup row and the charge were in one uncommitted transaction that died
 * with the process: nothing was charged, and the restart charges once.
 */
public final class CrashMidHandlerScenario implements Scenario {
  private static final String ORDER = "A-8001";
  private static final DedupKey KEY = DedupKey.of(BIZ_TYPE, ORDER);

  @Override
  public String id() {
    return "crash-mid-handler";
  }

  @Override
  public ScenarioResult run(DemoContext context) throws Exception {
    StringJoiner leftBehind = new StringJoiner("; ", "after the kill, before the restart: ", "");
    List<String> notes = new ArrayList<>();
    List<RunRow> rows = new ArrayList<>();
    for (Protection protection : Protection.values()) {
      rows.add(runOnce(context, protection, leftBehind, notes));
    }
    notes.add(0, leftBehind.toString());
    notes.add(
        "dedup TRANSACTIONAL: each record gets a JDBC transaction holding the dedup row and the"
            + " charge, committed before the offset; it needs the effects to be writes to the dedup"
            + " table's database (a call to a payment provider stays in the window: pass the order"
            + " number as its idempotency key)");
    notes.add(
        "the restart takes the killed consumer's place at once (static group membership,"
            + " group.instance.id, like a restarted pod with a stable name), so it meets the"
            + " child's lease still running");
    return new ScenarioResult(
        "8. Crash mid-handler: the payment consumer's JVM is killed right after charging order "
            + ORDER
            + ", before recording SUCCESS",
        "A deploy, an OOM kill or a node failure inside the handler, between the side effect and"
            + " the dedup record's SUCCESS: the one window of DedupMode.SEPARATE.",
        rows,
        notes);
  }

  private RunRow runOnce(
      DemoContext context, Protection protection, StringJoiner leftBehind, List<String> notes)
      throws Exception {
    try (ScenarioRun run = ScenarioRun.start(context, id(), protection.mode())) {
      run.ledger().open(EffectKind.CHARGE);
      long last = run.send(KEY_HEADER, ORDER, "confirm payment of 25.00");
      chargeInChildAndKill(run, protection);
      String survived = whatSurvived(run, protection);
      run.progress().step("after the kill: " + survived);
      leftBehind.add(protection.label() + " " + survived);
      run.progress().step("restarting the payment consumer in the killed one's place");
      try (CrashMidHandlerConsumer payments =
              CrashMidHandlerConsumer.create(
                  protection,
                  run.dataSource(),
                  run.settings().lease(),
                  "restarted-consumer",
                  run.group("billing"),
                  "billing (restarted)",
                  run.stats(),
                  record -> {});
          ScenarioConsumer restarted =
              payments.consumer(run.setup("billing (restarted)", "billing"))) {
        restarted.runUntilCommitted(last + 1, run.settings().runTimeout());
      }
      RunRow row = run.row(protection.label(), protection.withDedup(), EffectKind.CHARGE, 1);
      if (protection != Protection.SEPARATE) {
        return row;
      }
      Optional<DedupRecord> record = dedupRecord(run);
      notes.add(
          "dedup SEPARATE: the restart was told \"in progress\" "
              + row.retries()
              + " time(s) until the killed child's lease ("
              + run.settings().lease().toSeconds()
              + " s in this demo) ran out, then took the key over (attempt "
              + record.map(DedupRecord::attempts).orElse(0)
              + ") and charged again: the documented window, expected here");
      return row.expectingWindowEffects(1);
    }
  }

  /** Starts the consumer in a child JVM, waits until it has booked the charge, and kills it. */
  private void chargeInChildAndKill(ScenarioRun run, Protection protection) throws Exception {
    try (ChildJvm child =
        ChildJvm.start(
            CrashMidHandlerChild.class,
            List.of(
                run.bootstrapServers(),
                run.jdbcUrl(),
                run.topic(),
                run.group("billing"),
                protection.name(),
                Long.toString(run.settings().lease().toMillis())),
            CrashMidHandlerChild.CHARGED_LINE,
            run.progress())) {
      run.progress().step("started the payment consumer in a child JVM (pid " + child.pid() + ")");
      String line = child.awaitSignal(run.settings().runTimeout());
      int exitCode = child.kill();
      ChildJvm.addCounts(line, run.stats());
      run.progress()
          .step(
              "child JVM booked the charge of "
                  + ORDER
                  + " and was killed inside its handler, before anything else (exit code "
                  + exitCode
                  + ")");
    }
  }

  /** What the killed child left in the database: charges, and the dedup record if any. */
  private static String whatSurvived(ScenarioRun run, Protection protection) throws Exception {
    int charges = run.ledger().entries(EffectKind.CHARGE);
    String text = charges + (charges == 1 ? " charge" : " charges");
    if (!protection.withDedup()) {
      return text;
    }
    return text
        + dedupRecord(run)
            .map(
                record ->
                    ", key "
                        + record.status()
                        + (record.isLeaseLive() ? " under the child's live lease" : ""))
            .orElse(", no dedup row");
  }

  private static Optional<DedupRecord> dedupRecord(ScenarioRun run) {
    return JdbcDedupStore.builder(run.dataSource()).build().find(KEY);
  }
}
