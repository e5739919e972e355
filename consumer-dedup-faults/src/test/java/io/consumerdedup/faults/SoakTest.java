package io.consumerdedup.faults;

import io.consumerdedup.testing.ChildJvm;
import io.consumerdedup.testing.TcpProxy;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/**
 * A randomized soak: two consumers work through a topic that keeps growing while faults drawn from
 * F1-F9 hit them, one after another, for half of {@code faults.soakSeconds} in each mode. Every
 * draw comes from the printed seed, so {@code -Dfaults.seed=<seed>} replays the same sequence of
 * faults (their exact moments still depend on the machine's timing).
 */
class SoakTest {
  static final Duration LEASE = Duration.ofSeconds(2);
  static final String[] SLOTS = {"a", "b"};
  static final String[] POINTS = {"AFTER_HANDLER", "AFTER_SUCCESS_MARK", "AFTER_CLAIM"};

  @Test
  void randomFaultsFromF1ToF9ModeSeparate() throws Exception {
    soak("SEPARATE");
  }

  @Test
  void randomFaultsFromF1ToF9ModeTransactional() throws Exception {
    soak("TRANSACTIONAL");
  }

  /** Half of {@code faults.soakSeconds} in each mode. */
  private static void soak(String mode) throws Exception {
    long seconds = Long.getLong("faults.soakSeconds", 60) / 2;
    String name = "soak " + seconds + " s, F1-F9 at random";
    Reliability.scenario(
        name,
        mode,
        true,
        LEASE,
        run -> {
          Random random = new Random(Reliability.seed() ^ mode.hashCode());
          TcpProxy proxy = run.proxy();
          run.consumerArg("handlerMs", "5");
          AtomicBoolean producing = new AtomicBoolean(true);
          AtomicInteger producedCount = new AtomicInteger();
          Thread producer =
              new Thread(
                  () -> {
                    int batch = 0;
                    while (producing.get()) {
                      run.produce(20, "soak-" + batch++ + "-");
                      producedCount.addAndGet(20);
                      try {
                        Thread.sleep(500);
                      } catch (InterruptedException e) {
                        return;
                      }
                    }
                  },
                  "soak-producer");
          producer.start();
          run.watchOffsets();
          Map<String, ChildJvm> consumers = new LinkedHashMap<>();
          for (String slot : SLOTS) {
            consumers.put(slot, run.start(slot, null));
          }
          Map<String, Integer> drawn = new LinkedHashMap<>();
          AtomicInteger sessionsEnded = new AtomicInteger();
          long end = System.nanoTime() + Duration.ofSeconds(seconds).toNanos();
          while (System.nanoTime() < end) {
            // A consumer that halted at its fault point is counted and replaced.
            for (String slot : SLOTS) {
              ChildJvm consumer = consumers.get(slot);
              if (!consumer.isAlive()) {
                run.halted(consumer);
                consumers.put(slot, run.start(slot, null));
              }
            }
            String slot = SLOTS[random.nextInt(SLOTS.length)];
            int fault = random.nextInt(8);
            String label;
            switch (fault) {
              case 0 -> {
                label = "F1-F3 SIGKILL at a random moment";
                run.killAnyTime(consumers.get(slot));
                consumers.put(slot, run.start(slot, null));
              }
              case 1 -> {
                String point = POINTS[random.nextInt(POINTS.length)];
                label = "F1-F3 halt at " + point;
                run.stop(consumers.get(slot));
                consumers.put(slot, run.start(slot, point + ":halt:" + (1 + random.nextInt(40))));
              }
              case 2 -> {
                label = "F5 clean bounce";
                run.stop(consumers.get(slot));
                consumers.put(slot, run.start(slot, null));
              }
              case 3 -> {
                label = "F8 database refused 2-5 s";
                proxy.refuse();
                Thread.sleep(2_000 + random.nextInt(3_000));
                proxy.pass();
                run.faultEnded();
              }
              case 4 -> {
                label = "F9 200 ms latency for 3 s";
                proxy.latency(Duration.ofMillis(100));
                Thread.sleep(3_000);
                proxy.pass();
              }
              case 5 -> {
                label = "F6/F7 connections cut";
                proxy.cutAll();
                run.faultEnded();
              }
              case 6 -> {
                label = "F6/F7 sessions ended by the server";
                // Consumers just replaced may not have connected yet: wait for a session to end.
                int ended = 0;
                for (int tries = 0; tries < 40 && ended == 0; tries++) {
                  ended = run.database.endDedupSessions(run.schema);
                  if (ended == 0) {
                    Thread.sleep(250);
                  }
                }
                sessionsEnded.addAndGet(ended);
                run.faultEnded();
              }
              default -> {
                label = "F6/F7 next reply lost after the commit";
                proxy.dropNextReplyAndCut();
                run.faultEnded();
              }
            }
            drawn.merge(
                label.startsWith("F1-F3 halt") ? "F1-F3 halt at a fault point" : label,
                1,
                Integer::sum);
            Thread.sleep(1_000 + random.nextInt(2_000));
          }
          producing.set(false);
          producer.join();
          proxy.pass();
          for (String slot : SLOTS) {
            ChildJvm consumer = consumers.get(slot);
            if (!consumer.isAlive()) {
              run.halted(consumer);
              consumers.put(slot, run.start(slot, null));
            }
          }
          // A consumer still armed with a fault point would halt while finishing: replace it.
          for (String slot : SLOTS) {
            ChildJvm consumer = consumers.get(slot);
            if (!consumer.output().isEmpty() && armed(run, consumer)) {
              run.stop(consumer);
              consumers.put(slot, run.start(slot, null));
            }
          }
          run.faultEnded();
          run.notes.add(
              producedCount.get()
                  + " records produced meanwhile; faults drawn: "
                  + drawn
                  + "; "
                  + sessionsEnded
                  + " dedup sessions ended by the server (pg_terminate_backend)");
          if (drawn.containsKey("F6/F7 sessions ended by the server") && sessionsEnded.get() == 0) {
            run.violation("pg_terminate_backend ended no dedup session: the fault did not happen");
          }
          run.awaitDone(Duration.ofSeconds(60));
        });
  }

  private static boolean armed(FaultRun run, ChildJvm consumer) {
    return run.faultOf(consumer) != null && !consumer.output().contains("FAULT ");
  }
}
