package io.consumerdedup.faults;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.testing.ChildJvm;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.opentest4j.TestAbortedException;

/**
 * F26: the dedup table's primary dies (every process SIGKILLed, the replication link cut with it)
 * at a random moment while two consumers work through the topic on a multi-host URL ({@code
 * targetServerType=primary}), and its streaming standby is promoted ({@link StreamingPair}). The
 * handlers write their effects to another server, so the effects survive the failover as a payment
 * provider's would.
 *
 * <p>With asynchronous replication the standby is behind by {@link #REPLICATION_LAG}, and what the
 * primary committed in that time is gone: the scenario reports, per failover, the handlers that ran
 * again and the applied keys left without a SUCCESS row on the new primary (the duplicate window a
 * later redelivery of those keys would hit). With a synchronous standby and {@code
 * synchronous_commit=remote_apply} nothing acknowledged is lost: no handler runs again and no row
 * is missing. In both, no record is lost (each is applied, or dead-lettered with its reason), the
 * group commits every offset, no key is left PROCESSING, and the time from the promotion to the
 * first effect and to the end is measured.
 */
class FailoverFaultsTest {
  static final Duration LEASE = Duration.ofSeconds(3);
  static final Duration REPLICATION_LAG = Duration.ofMillis(750);
  static final Duration DETECTION = Duration.ofSeconds(1);
  static final Duration FINISH = Duration.ofSeconds(120);
  static final int RECORDS = 400;

  /**
   * The mode of F26's rows: the report sums their re-runs and missing rows into fields of their
   * own, apart from what crashed consumers cause.
   */
  static final String FAILOVER_MODE = "SEPARATE batched, failover";

  @Test
  void f26FailoverWithAnAsynchronousStandbyReportsReRunsAndMissingRows() throws Exception {
    Measured measured = failover("F26 failover, asynchronous standby", false);
    // The lag was real: the dead primary's last commits did not reach the new one.
    assertThat(measured.reRuns() + measured.missing()).isPositive();
  }

  @Test
  void f26FailoverWithASynchronousStandbyReRunsNothingAndLosesNoRow() throws Exception {
    Measured measured = failover("F26 failover, synchronous standby", true);
    assertThat(measured.reRuns()).isZero();
    assertThat(measured.missing()).isZero();
  }

  /**
   * What a failover left: handlers run again, applied keys without SUCCESS at the end, and leases
   * reported taken over (nobody takes one over here).
   */
  record Measured(int reRuns, int missing, int takenOver) {}

  private static Measured failover(String name, boolean synchronous) throws Exception {
    List<String> violations = new ArrayList<>();
    Measured measured = new Measured(-1, -1, -1);
    FaultRun run = new FaultRun(Target.PLAIN, name, "SEPARATE", true, LEASE);
    int lost = 0;
    int deadLettered = 0;
    boolean skipped = false;
    try (StreamingPair pair = new StreamingPair(synchronous)) {
      try {
        measured = runFailover(run, pair, synchronous);
        Map<String, FaultRun.DeadLetter> deadLetters = run.deadLetters(Duration.ofSeconds(3));
        deadLettered = deadLetters.size();
        Map<String, Integer> effects = effectsPerKey(run);
        for (FaultRun.Produced record : run.produced) {
          if (!effects.containsKey(record.key())
              && !deadLetters.containsKey(FaultRun.coordinates(record))) {
            lost++;
          }
        }
        if (lost > 0) {
          violations.add("I1: " + lost + " record(s) neither applied nor dead-lettered");
        }
        if (measured.takenOver() > 0) {
          violations.add(
              measured.takenOver()
                  + " lease(s) reported taken over, though each consumer kept its partitions: the"
                  + " records vanished");
        }
        if (synchronous && (measured.reRuns() > 0 || measured.missing() > 0)) {
          violations.add(
              "with a synchronous standby "
                  + measured.reRuns()
                  + " handler(s) ran again and "
                  + measured.missing()
                  + " applied key(s) lack SUCCESS");
        }
      } catch (Exception | AssertionError e) {
        violations.add("the scenario failed: " + e + "\n" + pair.logs());
      } finally {
        for (int i = 0; i < run.consumers.size(); i++) {
          ChildJvm child = run.consumers.get(i);
          child.close();
          Reliability.saveOutput(name, "consumer-" + (char) ('a' + i), child.output());
        }
      }
    } catch (TestAbortedException noServerBinaries) {
      // Nothing ran: a row would count the scenario as passed in the RELIABILITY line.
      skipped = true;
      throw noServerBinaries;
    } catch (Exception | Error e) {
      // The pair could not be made (or removed): the row says so rather than passed.
      violations.add("the scenario failed: " + e);
      throw e;
    } finally {
      long bound = LEASE.plus(FaultRun.SESSION_TIMEOUT).plus(FaultRun.SLACK).toMillis();
      if (run.recoveryMillis > bound) {
        violations.add("I5: done " + run.recoveryMillis + " ms after the promotion");
      }
      FaultRun.Verdict verdict =
          new FaultRun.Verdict(
              name,
              FAILOVER_MODE,
              run.produced.size(),
              lost,
              Math.max(0, measured.reRuns()),
              run.window,
              run.kills,
              deadLettered,
              run.recoveryMillis,
              bound,
              List.copyOf(violations),
              List.copyOf(run.notes));
      if (!skipped) {
        Reliability.record(verdict);
      }
      run.close();
    }
    assertThat(violations).as(name + " violated invariants").isEmpty();
    return measured;
  }

  private static Measured runFailover(FaultRun run, StreamingPair pair, boolean synchronous)
      throws Exception {
    Random random = Reliability.random(run.name);
    pair.createSchema(run.schema);
    if (!synchronous) {
      pair.lag(REPLICATION_LAG);
    }
    run.consumerArg("dedupJdbc", pair.url(run.schema));
    run.consumerArg("handlerMs", "10");
    run.produce(RECORDS, "order-");
    ChildJvm a = run.start("a", null);
    ChildJvm b = run.start("b", null);
    run.awaitFirstEffect(Duration.ofSeconds(60));
    // The failover must not meet the group's first rebalance: a partition handed over while the
    // database is away lets its new owner take keys over once their leases run out, as any
    // rebalance in an outage does, and this scenario counts what the failover alone does.
    long joinedBy = System.nanoTime() + Duration.ofSeconds(60).toNanos();
    while (!a.output().contains("Assigned [") || !b.output().contains("Assigned [")) {
      if (System.nanoTime() - joinedBy > 0) {
        throw new AssertionError("the two consumers did not share the partitions within 60 s");
      }
      Thread.sleep(20);
    }
    long killAfter = 300 + random.nextInt(2_000);
    Thread.sleep(killAfter);
    pair.killPrimary();
    run.kills++;
    long effectsAtKill = run.queryLong("SELECT count(*) FROM effects");
    run.notes.add(
        "primary SIGKILLed "
            + killAfter
            + " ms after the first effect, with "
            + effectsAtKill
            + " of "
            + RECORDS
            + " records applied; replication "
            + (synchronous
                ? "synchronous (remote_apply)"
                : "asynchronous, " + REPLICATION_LAG.toMillis() + " ms behind"));
    Thread.sleep(DETECTION.toMillis());
    pair.promoteStandby();
    run.faultEnded();
    long promotedAt = System.nanoTime();
    long effectsAtPromotion = run.queryLong("SELECT count(*) FROM effects");
    while (run.queryLong("SELECT count(*) FROM effects") == effectsAtPromotion) {
      if (System.nanoTime() - promotedAt > FINISH.toNanos()) {
        throw new AssertionError("no effect within " + FINISH + " of the promotion");
      }
      Thread.sleep(20);
    }
    run.notes.add(
        "first effect " + (System.nanoTime() - promotedAt) / 1_000_000 + " ms after promotion");
    awaitDone(run, pair);
    run.notes.add("all done " + run.recoveryMillis + " ms after promotion");

    Map<String, String> statuses = statuses(pair, run.schema);
    Map<String, Integer> effects = effectsPerKey(run);
    int reRuns = effects.values().stream().mapToInt(n -> n - 1).sum();
    long noRow = effects.keySet().stream().filter(key -> !statuses.containsKey(key)).count();
    long otherStatus =
        effects.keySet().stream()
            .filter(key -> statuses.containsKey(key) && !"SUCCESS".equals(statuses.get(key)))
            .count();
    int missing = (int) (noRow + otherStatus);
    run.notes.add(
        reRuns
            + " handler(s) ran again; "
            + missing
            + " applied key(s) without SUCCESS on the new primary ("
            + noRow
            + " without a row, "
            + otherStatus
            + " in another status)");
    String output = run.consumers.stream().map(ChildJvm::output).reduce("", String::concat);
    run.notes.add(
        count(output, "had vanished when")
            + " outcome(s) whose record vanished written again, "
            + count(output, "vanished while the handler ran")
            + " renewal(s) that found the record gone, "
            + count(output, "as a new key")
            + " key(s) claimed anew by the process that had held them, "
            + count(output, "taken over by another consumer")
            + " lease(s) reported taken over");
    int takenOver = count(output, "taken over by another consumer");
    // The window column of a failover row holds the applied keys whose SUCCESS it took away: each
    // may
    // run again once at a later redelivery. The report counts them apart from crashed consumers.
    run.window = missing;
    return new Measured(reRuns, missing, takenOver);
  }

  /**
   * Waits until the group committed every offset and no key on the new primary is held. A claim the
   * old primary had sent on before it completed may stay PROCESSING with its lease run out: its
   * SUCCESS is what the failover took away (counted as missing), and nothing redelivers it.
   */
  private static void awaitDone(FaultRun run, StreamingPair pair) throws Exception {
    long deadline = System.nanoTime() + FINISH.toNanos();
    while (System.nanoTime() < deadline) {
      if (run.allCommitted() && liveLeases(pair, run.schema) == 0) {
        run.recoveryMillis = (System.nanoTime() - run.lastFaultEndNanos) / 1_000_000;
        return;
      }
      Thread.sleep(200);
    }
    throw new AssertionError(
        "not done within " + FINISH + " of the promotion; consumer output:\n" + lastOutput(run));
  }

  private static String lastOutput(FaultRun run) {
    StringBuilder text = new StringBuilder();
    for (ChildJvm child : run.consumers) {
      String output = child.output();
      text.append("---\n").append(output.substring(Math.max(0, output.length() - 3000)));
    }
    return text.toString();
  }

  private static int count(String text, String phrase) {
    int count = 0;
    for (int at = text.indexOf(phrase); at >= 0; at = text.indexOf(phrase, at + 1)) {
      count++;
    }
    return count;
  }

  private static long liveLeases(StreamingPair pair, String schema) throws SQLException {
    try (Connection connection = pair.connectStandby();
        Statement statement = connection.createStatement();
        ResultSet rows =
            statement.executeQuery(
                "SELECT count(*) FROM "
                    + schema
                    + ".consumer_dedup WHERE status = 'PROCESSING' AND lease_until >= now()")) {
      rows.next();
      return rows.getLong(1);
    }
  }

  private static Map<String, String> statuses(StreamingPair pair, String schema)
      throws SQLException {
    Map<String, String> statuses = new HashMap<>();
    try (Connection connection = pair.connectStandby();
        Statement statement = connection.createStatement();
        ResultSet rows =
            statement.executeQuery("SELECT biz_key, status FROM " + schema + ".consumer_dedup")) {
      while (rows.next()) {
        statuses.put(rows.getString(1), rows.getString(2));
      }
    }
    return statuses;
  }

  private static Map<String, Integer> effectsPerKey(FaultRun run) throws SQLException {
    Map<String, Integer> effects = new HashMap<>();
    try (Connection connection = run.database.connect(run.schema);
        Statement statement = connection.createStatement();
        ResultSet rows =
            statement.executeQuery("SELECT biz_key, count(*) FROM effects GROUP BY biz_key")) {
      while (rows.next()) {
        effects.put(rows.getString(1), rows.getInt(2));
      }
    }
    return effects;
  }
}
