package io.consumerdedup.faults;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.testing.ChildJvm;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;
import org.junit.jupiter.api.Test;

/**
 * Share groups (KIP-932, Kafka queues): {@code DedupShareLoop} consumers in child JVMs, several per
 * partition. S1: a consumer killed (the JVM halted, as SIGKILL leaves it) in the handler of a key
 * it claimed; its record's lock runs out, another consumer acquires it, finds the key held under
 * the dead holder's lease and keeps the record acquired (renewed, no delivery counted) until the
 * lease runs out, then applies it: applied once, never archived unapplied with the broker's default
 * delivery count limit of 5. S2: three consumers of a topic whose keys come three times each,
 * mixed: each key applied once. S3: handlers of some keys run for two lock durations while copies
 * of those keys sit on the other partition, taken by other consumers: no two runs of one key at
 * once, each key run and applied once. S4: keys whose handler always fails are run three times
 * (released between), then dead-lettered and rejected. S5: records without a key or with a
 * malformed one are dead-lettered and rejected at once, the reason in the dead letter's headers.
 */
class ShareFaultsTest {
  static final Duration LOCK = Duration.ofSeconds(2);
  static final Duration FINISH_TIMEOUT = Duration.ofSeconds(120);

  @Test
  void s1AConsumerKilledInItsHandlerLeavesItsRecordAppliedOnceNeverArchived() throws Exception {
    // A lease of thirty locks: had the waiting copy been released at each try (1 s back-off at
    // most), it would have used up its five deliveries long before the lease ran out. And longer
    // than the share session timeout (45 s), until which the killed consumer may keep its
    // partition from the next one: with a lease of eight locks the next consumer sometimes
    // reached order-7 only after the lease, and waited for nothing.
    FaultRun.Verdict verdict =
        Reliability.scenario(
            "S1 share consumer killed in its handler",
            "SEPARATE",
            true,
            LOCK.multipliedBy(30),
            run -> {
              run.shareGroup(LOCK);
              run.produce(30, "order-");
              ChildJvm killed = run.start("a", "KEY:halt:order-7");
              run.awaitCrash(killed, Duration.ofSeconds(60));
              run.notes.add("halted in the handler of order-7");
              ChildJvm next = run.start("b", null);
              run.awaitDone(FINISH_TIMEOUT);
              // What the note says must have happened: had the next consumer reached order-7
              // after the dead holder's lease, nothing was kept acquired and nothing was tested.
              boolean waited = next.output().contains("cannot be handled yet");
              long takenOver =
                  run.queryLong(
                      "SELECT count(*) FROM consumer_dedup WHERE biz_key = 'order-7'"
                          + " AND status = 'SUCCESS' AND attempts >= 2");
              if (!waited || takenOver != 1) {
                run.violation(
                    "S1: the next consumer "
                        + (waited ? "waited" : "never waited")
                        + " for a live lease and "
                        + (takenOver == 1 ? "took" : "did not take")
                        + " order-7 over from the dead holder: the fault did not happen");
              }
              run.notes.add(
                  "the next consumer's copies of the killed one's claimed keys waited for its"
                      + " lease, kept acquired, then were applied once");
            });
    assertThat(verdict.lost()).isZero();
    // Mode SEPARATE's window: a record applied just before the kill whose SUCCESS mark was still
    // on its way runs again; no other record does.
    assertThat(verdict.duplicates()).isLessThanOrEqualTo(verdict.window());
  }

  @Test
  void s2ThreeShareConsumersOfKeysSentThreeTimesApplyEachKeyOnce() throws Exception {
    FaultRun.Verdict verdict =
        Reliability.scenario(
            "S2 three share consumers, duplicates",
            "SEPARATE",
            true,
            Duration.ofSeconds(10),
            run -> {
              run.shareGroup(Duration.ofSeconds(10));
              List<String[]> records = new ArrayList<>();
              for (int copy = 0; copy < 3; copy++) {
                for (int i = 0; i < 40; i++) {
                  records.add(new String[] {"order-" + i, "payload of order-" + i});
                }
              }
              Collections.shuffle(records, Reliability.random(run.name));
              run.produceAll(records);
              run.start("a", null);
              run.start("b", null);
              run.start("c", null);
              run.awaitDone(FINISH_TIMEOUT);
            });
    assertThat(verdict.lost()).isZero();
    assertThat(verdict.duplicates()).isZero();
  }

  @Test
  void s3HandlersSlowerThanTheLockNeverRunOneKeyTwiceAtOnce() throws Exception {
    // Renewed every second: the lock runs out only if a loop's thread or the broker stalls for 2 s
    // (a run with locks of 2 s on a loaded machine saw records delivered again mid-handler).
    Duration lock = Duration.ofSeconds(3);
    Duration slow = lock.multipliedBy(2);
    FaultRun.Verdict verdict =
        Reliability.scenario(
            "S3 share handlers slower than the lock",
            "SEPARATE",
            true,
            Duration.ofSeconds(10),
            run -> {
              run.shareGroup(lock);
              run.consumerArg("slowMs", String.valueOf(slow.toMillis()));
              run.consumerArg("recordRuns", "true");
              // Each slow key once on each partition: while one consumer runs it, another
              // acquires its copy.
              int slowKeys = 2;
              for (int partition = 0; partition < FaultRun.PARTITIONS; partition++) {
                List<String[]> records = new ArrayList<>();
                for (int i = 0; i < slowKeys; i++) {
                  records.add(new String[] {"slow-" + i, "payload of slow-" + i});
                }
                for (int i = 0; i < 12; i++) {
                  String key = "order-" + partition + "-" + i;
                  records.add(new String[] {key, "payload of " + key});
                }
                Collections.shuffle(records, Reliability.random(run.name + partition));
                run.produceAllTo(partition, records);
              }
              run.start("a", null);
              run.start("b", null);
              run.start("c", null);
              run.awaitDone(FINISH_TIMEOUT);
              List<FaultRun.HandlerRun> runs = run.handlerRuns();
              checkNoOverlap(run, runs);
              Map<String, Long> perKey =
                  runs.stream()
                      .collect(
                          Collectors.groupingBy(
                              FaultRun.HandlerRun::key, TreeMap::new, Collectors.counting()));
              perKey.forEach(
                  (key, n) -> {
                    if (n != 1) {
                      run.violation(key + "'s handler ran " + n + " times, not once");
                    }
                  });
              List<FaultRun.HandlerRun> slowRuns =
                  runs.stream().filter(r -> r.key().startsWith("slow-")).toList();
              long shortest =
                  slowRuns.stream().mapToLong(FaultRun.HandlerRun::millis).min().orElse(0);
              long longest =
                  slowRuns.stream().mapToLong(FaultRun.HandlerRun::millis).max().orElse(0);
              if (slowRuns.size() != slowKeys || shortest <= lock.toMillis()) {
                run.violation(
                    "the fault did not happen: "
                        + slowRuns.size()
                        + " slow handler runs, the shortest "
                        + shortest
                        + " ms, not longer than the lock of "
                        + lock.toMillis()
                        + " ms");
              }
              long waits = countInOutputs(run, "cannot be handled yet");
              run.notes.add(
                  slowKeys
                      + " keys' handlers ran "
                      + shortest
                      + "-"
                      + longest
                      + " ms against a lock of "
                      + lock.toMillis()
                      + " ms (over "
                      + String.format("%.1f", shortest / (double) lock.toMillis())
                      + " locks), each key's copy on the other partition; "
                      + runs.size()
                      + " handler runs by "
                      + runs.stream().map(FaultRun.HandlerRun::consumer).distinct().count()
                      + " consumers, one per key, none overlapping, deliveries "
                      + new TreeSet<>(runs.stream().map(FaultRun.HandlerRun::delivery).toList())
                      + "; "
                      + waits
                      + " waits for another consumer's claim");
              checkQueueEmpty(run);
            });
    assertThat(verdict.lost()).isZero();
    assertThat(verdict.duplicates()).isZero();
  }

  @Test
  void s4KeysWhoseHandlerAlwaysFailsAreDeadLetteredAfterTheirAttempts() throws Exception {
    FaultRun.Verdict verdict =
        Reliability.scenario(
            "S4 share handler always fails for some keys",
            "SEPARATE",
            true,
            Duration.ofSeconds(10),
            run -> {
              run.shareGroup(LOCK);
              run.consumerArg("recordRuns", "true");
              int poison = 4;
              List<String[]> records = new ArrayList<>();
              for (int i = 0; i < poison; i++) {
                records.add(new String[] {"poison-" + i, "poison payload " + i});
              }
              for (int i = 0; i < 30; i++) {
                records.add(new String[] {"order-" + i, "payload of order-" + i});
              }
              Collections.shuffle(records, Reliability.random(run.name));
              run.produceAll(records);
              run.start("a", null);
              run.start("b", null);
              run.start("c", null);
              run.awaitDone(FINISH_TIMEOUT);
              Map<String, FaultRun.DeadLetter> dlt = run.deadLetters(Duration.ofSeconds(3));
              if (dlt.size() != poison) {
                run.violation(
                    dlt.size() + " dead letters, not one per poison record (" + poison + ")");
              }
              List<FaultRun.HandlerRun> runs = run.handlerRuns();
              checkNoOverlap(run, runs);
              Map<String, List<Integer>> deliveries = new TreeMap<>();
              for (FaultRun.HandlerRun r : runs) {
                if (r.key().startsWith("poison-")) {
                  deliveries.computeIfAbsent(r.key(), k -> new ArrayList<>()).add(r.delivery());
                }
              }
              for (FaultRun.Produced record : run.produced) {
                FaultRun.DeadLetter dead = dlt.get(FaultRun.coordinates(record));
                if (!record.key().startsWith("poison-")) {
                  if (dead != null) {
                    run.violation(record.key() + " was dead-lettered");
                  }
                  continue;
                }
                String expected = "poison record " + record.key() + " always fails";
                if (dead == null) {
                  run.violation(record.key() + " is not on the dead-letter topic");
                } else if (!"IllegalStateException".equals(dead.exceptionName())
                    || !String.valueOf(dead.message()).contains(expected)) {
                  run.violation(
                      record.key()
                          + "'s dead letter gives "
                          + dead.exceptionClass()
                          + ": "
                          + dead.message());
                }
                long failed =
                    run.queryLong(
                        "SELECT count(*) FROM consumer_dedup WHERE biz_key = ? AND status ="
                            + " 'FAILED' AND attempts = 3",
                        record.key());
                if (failed != 1) {
                  run.violation(record.key() + " is not FAILED with 3 attempts in the table");
                }
                int ran = deliveries.getOrDefault(record.key(), List.of()).size();
                if (ran != 3) {
                  run.violation(record.key() + "'s handler ran " + ran + " times, not 3");
                }
              }
              run.notes.add(
                  poison
                      + " poison keys FAILED with attempts 3 in the table and dead-lettered"
                      + " (IllegalStateException), their handler runs on deliveries "
                      + deliveries.values().stream().distinct().toList()
                      + ", by "
                      + runs.stream()
                          .filter(r -> r.key().startsWith("poison-"))
                          .map(FaultRun.HandlerRun::consumer)
                          .distinct()
                          .count()
                      + " consumers; 30 other keys applied once");
              checkQueueEmpty(run);
              int after =
                  (int)
                      run.handlerRuns().stream().filter(r -> r.key().startsWith("poison-")).count();
              if (after != 3 * poison) {
                run.violation(after + " poison handler runs after the check, not " + 3 * poison);
              }
            });
    assertThat(verdict.lost()).isZero();
    assertThat(verdict.duplicates()).isZero();
    assertThat(verdict.deadLettered()).isEqualTo(4);
  }

  @Test
  void s5RecordsWithoutAValidKeyAreDeadLetteredAtOnceWithTheReason() throws Exception {
    FaultRun.Verdict verdict =
        Reliability.scenario(
            "S5 share records without a valid key",
            "SEPARATE",
            true,
            Duration.ofSeconds(10),
            run -> {
              run.shareGroup(LOCK);
              run.consumerArg("recordRuns", "true");
              run.produce(10, "order-");
              // label -> the exception the dead letter names
              Map<String, String> expected = new LinkedHashMap<>();
              expected.put("missing header", "DedupKeyMissingException");
              run.produceRaw("missing header", null, bytes("v1"), List.of());
              expected.put("empty header", "DedupKeyMissingException");
              run.produceRaw(
                  "empty header", null, bytes("v2"), List.of(FaultRun.keyHeader(new byte[0])));
              expected.put("malformed UTF-8", "DedupKeyMalformedException");
              run.produceRaw(
                  "malformed UTF-8",
                  null,
                  bytes("v3"),
                  List.of(FaultRun.keyHeader(new byte[] {(byte) 0xC3, (byte) 0x28})));
              expected.put("control characters", "DedupKeyMalformedException");
              run.produceRaw(
                  "control characters",
                  null,
                  bytes("v4"),
                  List.<Header>of(FaultRun.keyHeader(bytes("nul\u0000key\u0007"))));
              run.produce(10, "after-");
              run.start("a", null);
              run.start("b", null);
              run.awaitDone(FINISH_TIMEOUT);
              Map<String, FaultRun.DeadLetter> dlt = run.deadLetters(Duration.ofSeconds(3));
              List<String> labels = List.copyOf(expected.keySet());
              int i = 0;
              for (FaultRun.Produced record : run.produced) {
                if (record.hasKey()) {
                  continue;
                }
                String label = labels.get(i++);
                FaultRun.DeadLetter dead = dlt.get(FaultRun.coordinates(record));
                if (dead == null) {
                  run.violation(label + ": not on the dead-letter topic");
                  continue;
                }
                String where = run.topic + "-" + record.partition() + "@" + record.offset();
                if (!expected.get(label).equals(dead.exceptionName())
                    || dead.message() == null
                    || !dead.message().contains(where)) {
                  run.violation(
                      label
                          + ": expected "
                          + expected.get(label)
                          + " naming "
                          + where
                          + ", the dead letter gives "
                          + dead.exceptionClass()
                          + ": "
                          + dead.message());
                }
                run.notes.add(label + ": " + dead.exceptionName() + " (" + dead.message() + ")");
              }
              if (dlt.size() != expected.size()) {
                run.violation(dlt.size() + " dead letters, not " + expected.size());
              }
              // At once: no attempt counted, no handler run, no retry logged.
              long rows = run.queryLong("SELECT count(*) FROM consumer_dedup");
              long runs = run.handlerRuns().size();
              long retries = countInOutputs(run, "Handler failed");
              if (rows != 20 || runs != 20 || retries != 0) {
                run.violation(
                    "not at once: "
                        + rows
                        + " dedup rows and "
                        + runs
                        + " handler runs for the 20 good records, "
                        + retries
                        + " handler failures logged");
              }
              checkQueueEmpty(run);
            });
    assertThat(verdict.lost()).isZero();
    assertThat(verdict.duplicates()).isZero();
    assertThat(verdict.deadLettered()).isEqualTo(4);
  }

  /** Two runs of one key at the same time, in any consumers, are a violation. */
  private static void checkNoOverlap(FaultRun run, List<FaultRun.HandlerRun> runs) {
    List<String> overlaps = FaultRun.overlapping(runs);
    if (!overlaps.isEmpty()) {
      run.violation("runs of one key at the same time: " + overlaps);
    }
  }

  /**
   * Nothing left to do in the queue once the consumers stop: every record accepted or rejected,
   * none released or archived unseen. A copy still waiting for another consumer's claim when the
   * consumers were stopped is released by its consumer's close; if its key is SUCCESS by then, the
   * next consumer accepts it as a duplicate, so it is counted apart and not held against the run.
   */
  private static void checkQueueEmpty(FaultRun run) throws Exception {
    List<ConsumerRecord<String, String>> left = run.queueLeft(Duration.ofSeconds(4));
    List<ConsumerRecord<String, String>> unsettled =
        left.stream().filter(record -> !run.ofAppliedKey(record)).toList();
    if (!unsettled.isEmpty()) {
      run.violation(
          unsettled.size()
              + " records left in the queue whose key is not SUCCESS, first at partition "
              + unsettled.get(0).partition()
              + " offset "
              + unsettled.get(0).offset());
    } else if (left.isEmpty()) {
      run.notes.add("queue empty afterwards");
    } else {
      run.notes.add(
          "queue afterwards: " + left.size() + " released copies of applied keys, nothing else");
    }
  }

  private static long countInOutputs(FaultRun run, String text) {
    long count = 0;
    for (ChildJvm child : run.consumers) {
      String output = child.output();
      for (int at = output.indexOf(text); at >= 0; at = output.indexOf(text, at + 1)) {
        count++;
      }
    }
    return count;
  }

  private static byte[] bytes(String text) {
    return text.getBytes(StandardCharsets.UTF_8);
  }
}
