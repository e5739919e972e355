package io.consumerdedup.faults;

import io.consumerdedup.testing.ChildJvm;
import io.consumerdedup.testing.TcpProxy;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.Statement;
import java.time.Duration;
import java.util.Random;
import org.junit.jupiter.api.Test;

/**
 * The database misbehaves between the consumer and PostgreSQL (a TCP proxy, and the server ending
 * sessions): F8 it refuses connections for seconds, F9 every round trip takes 200 ms more, F6/F7
 * replies of claims and marks are lost after the server committed them and connections are cut,
 * F4/F18 a zombie whose connection stalls (no reply, no reset) during its renewals while another
 * consumer takes over. Each runs on MariaDB ({@link MariaDbFaultsTest}) and through the Spring Boot
 * listener ({@link SpringFaultsTest}) as well.
 */
class DatabaseFaultsTest {
  static final Duration LEASE = Duration.ofSeconds(3);
  static final Duration START = Duration.ofSeconds(60);
  static final Duration FINISH = Duration.ofSeconds(60);

  @Test
  void f8DatabaseUnreachableForSecondsHoldsRecordsAndAppliesThemOnceAfterwards() throws Exception {
    databaseUnreachable(Target.PLAIN, true, 100, 5_000);
  }

  /**
   * F8: {@code records} produced, then the database refuses connections for 5 s + a draw below
   * {@code extraOutageMillis} while half as many more are produced.
   */
  static void databaseUnreachable(
      Target target, boolean batched, int records, int extraOutageMillis) throws Exception {
    Reliability.scenario(
        target,
        "F8 database unreachable",
        "SEPARATE",
        batched,
        LEASE,
        run -> {
          Random random = Reliability.random(run.name);
          TcpProxy proxy = run.proxy();
          run.consumerArg("handlerMs", "20");
          run.produce(records, "order-");
          run.watchOffsets();
          ChildJvm consumer = run.start("a", null);
          consumer.awaitLine("APPLIED", START);
          long outage = 5_000 + random.nextInt(extraOutageMillis);
          proxy.refuse();
          run.notes.add(
              target.database.displayName
                  + " refused for "
                  + outage
                  + " ms, "
                  + records / 2
                  + " records produced meanwhile");
          run.produce(records / 2, "during-outage-");
          Thread.sleep(outage);
          // Handlers of keys claimed before the outage may still run during it, however long a
          // loaded machine takes over them; a key without a claim must not. No claim can be
          // written while the database refuses, so an effect whose key has no record yet ran
          // without one. Read before the database is back, directly (not through the proxy).
          long unclaimed =
              run.queryLong(
                  "SELECT count(*) FROM effects e WHERE NOT EXISTS"
                      + " (SELECT 1 FROM consumer_dedup d WHERE d.biz_key = e.biz_key)");
          // The outage took effect: of the records produced during it (handled in well under a
          // second with the database there), none could be claimed. The resets counted below
          // are of the pool's idle connections, which proves the proxy acted, not that the
          // consumer ever met a refusal.
          long claimedDuringOutage =
              run.queryLong(
                  "SELECT count(*) FROM consumer_dedup WHERE biz_key LIKE 'during-outage-%'");
          proxy.pass();
          run.faultEnded();
          if (unclaimed != 0) {
            run.violation("F8: " + unclaimed + " handlers ran without a claim");
          }
          if (proxy.connectionsReset() == 0) {
            run.violation("F8: the proxy cut no connection: the outage did not happen");
          }
          if (claimedDuringOutage != 0) {
            run.violation(
                "F8: "
                    + claimedDuringOutage
                    + " records produced during the outage were claimed before the database was"
                    + " back: the outage did not happen");
          }
          run.awaitDone(FINISH);
          // Within the store's retry budget (retryMaxDuration, 10 s) a claim waits for the
          // database; beyond it the record is held and the loop says so.
          run.notes.add(
              consumer.output().contains("Dedup store unavailable")
                  ? "records held (\"Dedup store unavailable ... not committing past it\")"
                  : "claims waited within the store's retries");
        });
  }

  @Test
  void f9TwoHundredMillisecondsMoreOnEveryRoundTrip() throws Exception {
    latency(Target.PLAIN, 100);
  }

  /** F9: every round trip to the database takes 200 ms more while {@code records} are consumed. */
  static void latency(Target target, int records) throws Exception {
    Reliability.scenario(
        target,
        "F9 200 ms database latency",
        "SEPARATE",
        true,
        LEASE,
        run -> {
          TcpProxy proxy = run.proxy();
          proxy.latency(Duration.ofMillis(100)); // each way: 200 ms per round trip
          long roundTrip = roundTripMillis(run, proxy);
          if (roundTrip < 200) {
            run.violation("F9: a round trip through the proxy took " + roundTrip + " ms");
          }
          run.notes.add("a SELECT 1 through the proxy took " + roundTrip + " ms");
          run.produce(records, "order-");
          run.watchOffsets();
          run.start("a", null);
          run.awaitDone(Duration.ofSeconds(90));
        });
  }

  @Test
  void f6f7RepliesOfClaimsAndMarksLostAfterTheCommitAndConnectionsCut() throws Exception {
    repliesLostAndConnectionsCut(Target.PLAIN, 120, Duration.ofSeconds(6));
  }

  /**
   * F6/F7: while a consumer works through {@code records}, for {@code during} the next reply of the
   * database is lost after the server committed and its connection reset, again and again, and
   * every fourth time every connection is cut.
   */
  static void repliesLostAndConnectionsCut(Target target, int records, Duration during)
      throws Exception {
    Reliability.scenario(
        target,
        "F6/F7 replies lost, connections cut",
        "SEPARATE",
        false,
        LEASE,
        run -> {
          TcpProxy proxy = run.proxy();
          run.consumerArg("handlerMs", "10");
          run.produce(records, "order-");
          run.watchOffsets();
          ChildJvm consumer = run.start("a", null);
          consumer.awaitLine("APPLIED", START);
          long until = System.nanoTime() + during.toNanos();
          int cuts = 0;
          boolean serverEnds = run.database == FaultDatabase.POSTGRES;
          int sessionsEnded = 0;
          while (System.nanoTime() < until) {
            int dropped = proxy.repliesDropped();
            proxy.dropNextReplyAndCut();
            long wait = System.nanoTime() + Duration.ofSeconds(2).toNanos();
            while (proxy.repliesDropped() == dropped && System.nanoTime() < wait) {
              Thread.sleep(5);
            }
            Thread.sleep(150);
            if (++cuts % 4 != 0) {
              continue;
            }
            // Every fourth time all connections go: cut by the proxy, or on PostgreSQL every
            // other time ended by the server itself (an administrator, a failover).
            if (serverEnds && cuts % 8 == 0) {
              sessionsEnded += run.database.endDedupSessions(run.schema);
            } else {
              proxy.cutAll();
            }
          }
          run.faultEnded();
          run.notes.add(
              proxy.repliesDropped()
                  + " replies lost after the server committed, "
                  + proxy.connectionsReset()
                  + " connections reset"
                  + (serverEnds ? ", " + sessionsEnded + " sessions ended by the server" : ""));
          if (proxy.repliesDropped() < 5) {
            run.violation("F6/F7: only " + proxy.repliesDropped() + " replies were lost");
          }
          if (serverEnds && sessionsEnded == 0) {
            run.violation("F6/F7: pg_terminate_backend ended no dedup session");
          }
          run.awaitDone(FINISH);
        });
  }

  @Test
  void f4f18AZombieWhoseConnectionStallsLosesItsLeaseAndItsLateMarkIsRefused() throws Exception {
    zombie(Target.PLAIN, 60);
  }

  /**
   * F4/F18: a consumer's handler blocks past {@code max.poll.interval.ms} and the lease while its
   * dedup connection stalls; another consumer waits the lease out and takes the key over, and the
   * zombie's late SUCCESS is refused by fencing.
   */
  static void zombie(Target target, int records) throws Exception {
    Reliability.scenario(
        target,
        "F4/F18 zombie, stalled connection",
        "SEPARATE",
        false,
        LEASE,
        run -> {
          TcpProxy zombieLink = run.newProxy();
          run.consumerArg("handlerMs", "20");
          run.consumerArg("maxPollIntervalMs", "6000");
          run.produce(records, "order-");
          run.watchOffsets();
          // The zombie's handler stalls for 15 s (past max.poll.interval.ms and the lease) after
          // its effect; its dedup connection stalls meanwhile, so its renewals get no reply.
          // It starts alone, so it holds both partitions when it stalls; the other consumer joins
          // then, and gets them once the zombie is out of the group (max.poll.interval.ms).
          ChildJvm zombie = run.start("zombie", "AFTER_HANDLER:stall15000:5", zombieLink);
          zombie.awaitLine("FAULT AFTER_HANDLER", START);
          long stallStarted = System.nanoTime();
          zombieLink.blackhole();
          run.measureWindowOf(zombie);
          ChildJvm other = run.start("other", null, null);
          // Let the other consumer take the key over (its lease ran out unrenewed, the zombie out
          // of the group), then wake the zombie and let its connection answer again: its late
          // SUCCESS must be refused. Given as long as the 15 s stall and the 8 s after it that
          // this once waited out whatever happened; ended as soon as the key is taken over.
          // Taken over: no key the zombie applied is still on its first attempt without SUCCESS
          // (a key of another record of its poll taken over first would not do).
          long takeoverDeadline = stallStarted + Duration.ofSeconds(15 + 8).toNanos();
          while (run.queryLong(
                      "SELECT count(*) FROM effects e JOIN consumer_dedup d"
                          + " ON d.biz_key = e.biz_key WHERE e.consumer LIKE 'zombie-%'"
                          + " AND d.status <> 'SUCCESS' AND d.attempts = 1")
                  > 0
              && System.nanoTime() < takeoverDeadline) {
            Thread.sleep(100);
          }
          if (zombie.isAlive()) {
            zombie.send("resume");
          }
          zombie.awaitLine("RESUMED", Duration.ofSeconds(30));
          zombieLink.pass();
          run.faultEnded();
          run.awaitDone(FINISH);
          long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
          while (!zombie.output().contains("was taken over by another consumer")
              && System.nanoTime() < deadline) {
            Thread.sleep(200);
          }
          if (!zombie.output().contains("was taken over by another consumer")) {
            run.violation(
                "F4: the zombie's late SUCCESS was not refused by fencing; its output:\n"
                    + tail(zombie.output()));
          } else {
            run.notes.add("the zombie's late SUCCESS was refused (lease taken over)");
          }
          long takenOver = run.queryLong("SELECT count(*) FROM consumer_dedup WHERE attempts > 1");
          run.notes.add(takenOver + " key(s) taken over by the other consumer");
          if (takenOver == 0) {
            run.violation("F4: no key was taken over: the zombie's lease never ran out");
          }
          other.close();
        });
  }

  static String tail(String output) {
    return output.length() > 4000 ? output.substring(output.length() - 4000) : output;
  }

  private static long roundTripMillis(FaultRun run, TcpProxy proxy) throws Exception {
    try (Connection connection =
            DriverManager.getConnection(run.database.dedupUrl(run.schema, proxy));
        Statement statement = connection.createStatement()) {
      statement.execute("SELECT 1");
      long start = System.nanoTime();
      statement.execute("SELECT 1");
      return (System.nanoTime() - start) / 1_000_000;
    }
  }
}
