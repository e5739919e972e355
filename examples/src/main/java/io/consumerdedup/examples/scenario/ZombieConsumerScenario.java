package io.consumerdedup.examples.scenario;

import io.consumerdedup.examples.DemoContext;
import io.consumerdedup.examples.DemoSettings;
import io.consumerdedup.examples.kafka.ScenarioConsumer;
import io.consumerdedup.examples.ledger.Bank;
import io.consumerdedup.examples.ledger.EffectHandler;
import io.consumerdedup.examples.ledger.EffectKind;
import io.consumerdedup.examples.report.RunRow;
import io.consumerdedup.examples.report.ScenarioResult;
import io.consumerdedup.kafka.RecordHandler;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

/**
 * A consumer whose bank call hangs longer than {@code max.poll.interval.ms} is thrown out of the
 * group; the partition moves to a second member, which gets the same record while the first is
 * still charging. The first, now a zombie, finishes its charge anyway. Without dedup its commit is
 * refused and the order is charged twice; with dedup the second member holds the key while the
 * zombie's lease is renewed, and whichever member reads the record after the zombie's SUCCESS skips
 * it.
 */
public final class ZombieConsumerScenario implements Scenario {
  private static final String KEY_HEADER = "order-no";
  private static final String ORDER = "A-2001";

  @Override
  public String id() {
    return "zombie";
  }

  @Override
  public ScenarioResult run(DemoContext context) throws Exception {
    DemoSettings settings = context.settings();
    List<String> notes = new ArrayList<>();
    List<RunRow> rows = List.of(runOnce(context, false, notes), runOnce(context, true, notes));
    notes.add(
        "max.poll.interval.ms "
            + settings.zombieMaxPollInterval().toMillis()
            + ", slow bank call "
            + settings.zombieBankLatency().toSeconds()
            + " s, dedup lease "
            + settings.zombieLease().toSeconds()
            + " s renewed while the handler runs, so the slow consumer keeps the key");
    return new ScenarioResult(
        "5. Zombie consumer: a slow consumer exceeds max.poll.interval.ms while charging order "
            + ORDER,
        "A GC pause or a hanging downstream call outlasts max.poll.interval.ms: the group hands"
            + " the partition to another member, and both work on the same record.",
        rows,
        notes);
  }

  private RunRow runOnce(DemoContext context, boolean withDedup, List<String> notes)
      throws Exception {
    DemoSettings settings = context.settings();
    ExecutorService threads = Executors.newFixedThreadPool(2);
    try (ScenarioRun run = ScenarioRun.start(context, id(), ScenarioRun.mode(withDedup))) {
      run.ledger().open(EffectKind.CHARGE);
      long last = run.send(KEY_HEADER, ORDER, "confirm payment of 25.00");
      CountDownLatch slowCallStarted = new CountDownLatch(1);
      EffectHandler slowPayments =
          new EffectHandler(
              run.ledger(),
              EffectKind.CHARGE,
              KEY_HEADER,
              Bank.slow(settings.zombieBankLatency()),
              "billing A",
              run.stats());
      RecordHandler<String, String> consumerA =
          record -> {
            slowCallStarted.countDown();
            slowPayments.handle(record);
          };
      EffectHandler consumerB =
          new EffectHandler(
              run.ledger(),
              EffectKind.CHARGE,
              KEY_HEADER,
              Bank.healthy(),
              "billing B",
              run.stats());
      ScenarioConsumer loopA = billing(run, "A", withDedup, consumerA);
      Future<ScenarioConsumer.End> endA =
          threads.submit(() -> loopA.runUntilCommitted(last + 1, settings.runTimeout()));
      if (!slowCallStarted.await(settings.runTimeout().toSeconds(), TimeUnit.SECONDS)) {
        throw new IllegalStateException("Consumer A never started to charge " + ORDER);
      }
      run.progress()
          .step(
              "consumer A is in a "
                  + settings.zombieBankLatency().toSeconds()
                  + " s bank call, longer than max.poll.interval.ms ("
                  + settings.zombieMaxPollInterval().toMillis()
                  + " ms); consumer B joins the group");
      ScenarioConsumer loopB = billing(run, "B", withDedup, consumerB);
      Future<ScenarioConsumer.End> endB =
          threads.submit(() -> loopB.runUntilCommitted(last + 1, settings.runTimeout()));
      ScenarioConsumer.End a = endA.get();
      ScenarioConsumer.End b = endB.get();
      notes.add(
          ScenarioRun.label(withDedup)
              + ": consumer A ended "
              + a
              + ", consumer B ended "
              + b
              + (withDedup
                  ? " (B found the key in progress under A's renewed lease and held it; once A"
                      + " recorded SUCCESS, the record was skipped as a duplicate)"
                  : " (B charged while A was still charging)"));
      return run.row(ScenarioRun.label(withDedup), withDedup, EffectKind.CHARGE, 1);
    } finally {
      threads.shutdownNow();
    }
  }

  /**
   * Billing consumer {@code id} with the scenario's short {@code max.poll.interval.ms} and, with
   * dedup, a lease longer than it, held under the owner id {@code consumer-<id>}. In-progress keys
   * are thrown (the default), not waited for: the loop holds the record and polls on, so waiting
   * for A does not make B exceed {@code max.poll.interval.ms} in turn.
   */
  private static ScenarioConsumer billing(
      ScenarioRun run, String id, boolean withDedup, RecordHandler<String, String> handler) {
    DemoSettings settings = run.settings();
    return run.consumer(
        run.setup("consumer " + id, "billing")
            .consumerProperty(
                "max.poll.interval.ms", Long.toString(settings.zombieMaxPollInterval().toMillis()))
            .build(),
        withDedup,
        "payment",
        KEY_HEADER,
        handler,
        executor -> executor.lease(settings.zombieLease()).ownerId("consumer-" + id));
  }
}
