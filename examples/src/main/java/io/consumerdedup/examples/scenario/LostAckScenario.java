package io.consumerdedup.examples.scenario;

import io.consumerdedup.examples.DemoContext;
import io.consumerdedup.examples.ledger.Bank;
import io.consumerdedup.examples.ledger.EffectHandler;
import io.consumerdedup.examples.ledger.EffectKind;
import io.consumerdedup.examples.report.RunRow;
import io.consumerdedup.examples.report.ScenarioResult;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.UnaryOperator;

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
                + " charge again: the one window of DedupMode.SEPARATE; DedupMode.TRANSACTIONAL"
                + " closes it"));
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
              "billing (restarted)",
              "billing",
              run.processor(
                  withDedup, "billing", "payment", KEY_HEADER, payments, UnaryOperator.identity()))
          .runUntilCommitted(last + 1, run.settings().runTimeout());
      return run.row(ScenarioRun.label(withDedup), withDedup, EffectKind.CHARGE, 1);
    }
  }

  /** Starts the consumer in a child JVM, waits until it has charged, and kills it. */
  private static void chargeInChildAndKill(ScenarioRun run, boolean withDedup) throws Exception {
    ProcessBuilder builder =
        new ProcessBuilder(
                Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-XX:TieredStopAtLevel=1",
                "-cp",
                System.getProperty("java.class.path"),
                LostAckChild.class.getName(),
                run.bootstrapServers(),
                run.jdbcUrl(),
                run.topic(),
                run.group("billing"),
                ScenarioRun.mode(withDedup),
                Long.toString(run.settings().lease().toMillis()))
            .redirectErrorStream(true);
    Process child = builder.start();
    run.progress().step("started the payment consumer in a child JVM (pid " + child.pid() + ")");
    CompletableFuture<String> charged = new CompletableFuture<>();
    Thread reader =
        new Thread(
            () -> {
              try (BufferedReader lines =
                  new BufferedReader(
                      new InputStreamReader(child.getInputStream(), StandardCharsets.UTF_8))) {
                String line;
                while ((line = lines.readLine()) != null) {
                  if (line.startsWith(LostAckChild.CHARGED_LINE)) {
                    charged.complete(line);
                  } else {
                    run.progress().step("  child JVM | " + line.strip());
                  }
                }
                charged.completeExceptionally(
                    new IllegalStateException("The child JVM ended before it charged"));
              } catch (Exception e) {
                charged.completeExceptionally(e);
              }
            },
            "lost-ack-child-output");
    reader.setDaemon(true);
    reader.start();
    String line;
    try {
      line = charged.get(run.settings().runTimeout().toSeconds(), TimeUnit.SECONDS);
    } catch (TimeoutException e) {
      throw new IllegalStateException(
          "The child JVM did not charge within " + run.settings().runTimeout(), e);
    } finally {
      child.destroyForcibly();
      child.waitFor();
    }
    String[] counts = line.split(" ");
    run.stats()
        .add(Integer.parseInt(counts[1]), Integer.parseInt(counts[2]), Integer.parseInt(counts[3]));
    run.progress()
        .step(
            "child JVM charged "
                + ORDER
                + " and was killed before its offset commit (exit code "
                + child.exitValue()
                + ")");
  }
}
