package io.consumerdedup.faults;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.ChildJvm;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.apache.kafka.common.header.Header;
import org.junit.jupiter.api.Test;

/**
 * What comes in is wrong: hostile or broken records (each ends processed once or on the dead-letter
 * topic with the reason in a header), F10 poison records and F11 transient failures while the
 * partitions move, F12 a key with another payload and F13 a key twice in one batch, and a dedup
 * table that is missing or lacks columns.
 */
class InputFaultsTest {
  static final Duration LEASE = Duration.ofSeconds(2);
  static final Duration START = Duration.ofSeconds(60);
  static final Duration FINISH = Duration.ofSeconds(60);

  @Test
  void badInputEndsProcessedOnceOrDeadLetteredWithTheReason() throws Exception {
    badInput(Target.PLAIN);
  }

  /**
   * Hostile and broken records among good ones: each ends processed once or on the dead-letter
   * topic, its reason in a header; then the start-up checks of a wrong table.
   */
  static void badInput(Target target) throws Exception {
    Reliability.scenario(
        target,
        "bad input",
        "SEPARATE",
        batchedUnlessSpring(target),
        LEASE,
        run -> {
          // label -> expected: "processed" or the exception class the dead letter names.
          Map<String, String> expected = new LinkedHashMap<>();
          run.consumerArg("deadLetters", "true");
          run.produce(10, "order-");
          raw(run, expected, "missing header", "DedupKeyMissingException", "v", List.of());
          raw(
              run,
              expected,
              "empty header",
              "DedupKeyMissingException",
              "v",
              List.of(FaultRun.keyHeader(new byte[0])));
          raw(
              run,
              expected,
              "malformed UTF-8",
              "DedupKeyMalformedException",
              "v",
              List.of(FaultRun.keyHeader(new byte[] {(byte) 0xC3, (byte) 0x28})));
          raw(
              run,
              expected,
              "10,000-char key",
              "processed",
              "v",
              List.of(header("long-" + "x".repeat(9_995))));
          raw(
              run,
              expected,
              "NUL and control characters",
              "DedupKeyMalformedException",
              "v",
              List.of(header("nul\u0000key\u0007")));
          raw(
              run,
              expected,
              "SQL text",
              "processed",
              "v",
              List.of(header("x'); DROP TABLE consumer_dedup; --")));
          raw(run, expected, "tombstone", "processed", null, List.of(header("tombstone-1")));
          raw(
              run,
              expected,
              "900 KB payload",
              "processed",
              "p".repeat(900_000),
              List.of(header("huge-1")));
          raw(
              run,
              expected,
              "header twice (the last wins)",
              "processed",
              "v",
              List.of(header("first-of-two"), header("last-of-two")));
          run.produce(10, "after-");
          run.watchOffsets();
          run.start("a", null);
          run.awaitDone(FINISH);
          Map<String, FaultRun.DeadLetter> dlt = run.deadLetters(Duration.ofSeconds(3));
          int i = 0;
          for (FaultRun.Produced record : run.produced) {
            if (record.hasKey()) {
              continue;
            }
            String label = List.copyOf(expected.keySet()).get(i++);
            String want = expected.get(label);
            FaultRun.DeadLetter dead = dlt.get(FaultRun.coordinates(record));
            String seen;
            if (dead != null) {
              seen = dead.exceptionName();
              run.notes.add(
                  label + ": dead-lettered, " + seen + " (" + abbreviate(dead.message()) + ")");
            } else {
              long effects =
                  run.queryLong("SELECT count(*) FROM effects WHERE biz_key = ?", record.key());
              seen = effects == 1 ? "processed" : effects + " effects";
              run.notes.add(label + ": " + seen + " once");
            }
            if (!seen.equals(want)) {
              run.violation(label + ": expected " + want + ", saw " + seen);
            }
          }
          if (run.queryLong("SELECT count(*) FROM consumer_dedup WHERE biz_key = 'first-of-two'")
              != 0) {
            run.violation("header twice: the first header was used as the key");
          }
          if (!target.spring()) {
            // The Spring Boot application's start-up with such a table: FirstHourMistakesTest.
            checkTables(run);
          }
        });
  }

  /** An unknown table and a table without the expected columns: a clear error naming it. */
  private static void checkTables(FaultRun run) {
    run.execute("CREATE TABLE dedup_old (biz_type varchar(64), biz_key varchar(256), status text)");
    try (HikariDataSource pool = run.pool(2)) {
      for (String table : List.of("no_such_table", "dedup_old")) {
        JdbcDedupStore store = JdbcDedupStore.builder(pool).tableName(table).build();
        try {
          store.verifyTable();
          run.violation("verifyTable() accepted the table " + table);
        } catch (IllegalStateException e) {
          run.notes.add("table " + table + " at start-up: " + abbreviate(e.getMessage()));
          if (!e.getMessage().contains(table)) {
            run.violation("the start-up error does not name " + table + ": " + e.getMessage());
          }
        }
        try (IdempotentExecutor executor = IdempotentExecutor.builder(store).build()) {
          executor.execute(DedupKey.of("fault-order", "k"), () -> null);
          run.violation("a claim on the table " + table + " succeeded");
        } catch (RuntimeException e) {
          run.notes.add(
              "table "
                  + table
                  + " at first use: "
                  + e.getClass().getSimpleName()
                  + " ("
                  + abbreviate(e.getMessage())
                  + ")");
          if (!String.valueOf(e.getMessage()).contains(table)) {
            run.violation("the first-use error does not name " + table + ": " + e.getMessage());
          }
        }
      }
    }
  }

  @Test
  void f10f11PoisonAndTransientFailuresWhileThePartitionsMove() throws Exception {
    poisonAndTransientFailures(Target.PLAIN);
  }

  /**
   * F10/F11: poison records (1 %) end on the dead-letter topic after three attempts and records
   * that fail once are applied on their second try, while a consumer is killed and its partitions
   * move.
   */
  static void poisonAndTransientFailures(Target target) throws Exception {
    Reliability.scenario(
        target,
        "F10/F11 poison 1%, transient failures",
        "SEPARATE",
        batchedUnlessSpring(target),
        LEASE,
        run -> {
          Random random = Reliability.random(run.name);
          run.consumerArg("deadLetters", "true");
          List<String[]> records = new ArrayList<>();
          for (int i = 0; i < 2; i++) {
            records.add(new String[] {"poison-" + i, "poison payload " + i});
          }
          for (int i = 0; i < 10; i++) {
            records.add(new String[] {"flaky-" + i, "flaky payload " + i});
          }
          for (int i = 0; i < 188; i++) {
            records.add(new String[] {"order-" + i, "payload " + i});
          }
          Collections.shuffle(records, random);
          run.consumerArg("handlerMs", "10");
          run.produceAll(records);
          run.watchOffsets();
          run.start("a", null);
          ChildJvm b = run.start("b", null);
          run.awaitFirstEffect(START);
          Thread.sleep(500 + random.nextInt(1_500));
          run.kill(b); // its partitions move to a, then back to the new b
          run.start("b", null);
          run.notes.add("consumer b killed and restarted mid-run");
          run.awaitDone(FINISH);
          Map<String, FaultRun.DeadLetter> dlt = run.deadLetters(Duration.ofSeconds(3));
          for (FaultRun.Produced record : run.produced) {
            boolean dead = dlt.containsKey(FaultRun.coordinates(record));
            if (record.key().startsWith("poison-") && !dead) {
              run.violation("F10: " + record.key() + " is not on the dead-letter topic");
            }
            if (!record.key().startsWith("poison-") && dead) {
              run.violation("F11: " + record.key() + " was dead-lettered");
            }
          }
          long attempts =
              run.queryLong(
                  "SELECT min(attempts) FROM consumer_dedup WHERE biz_key LIKE 'poison-%'");
          run.notes.add(
              "2 poison records dead-lettered after "
                  + attempts
                  + " attempts, 10 flaky records applied on their second try");
          if (attempts < 3) {
            run.violation("F10: poison dead-lettered after " + attempts + " attempts, not 3");
          }
        });
  }

  @Test
  void f12f13AnotherPayloadIsAConflictAndAKeyTwiceInOneBatchIsADuplicate() throws Exception {
    conflictsAndDuplicates(Target.PLAIN);
  }

  /**
   * F12/F13: a key again with another payload is dead-lettered as a conflict, a key twice in a row
   * (in one poll) is applied once.
   */
  static void conflictsAndDuplicates(Target target) throws Exception {
    Reliability.scenario(
        target,
        "F12/F13 conflicts, duplicates in a batch",
        "SEPARATE",
        batchedUnlessSpring(target),
        LEASE,
        run -> {
          run.consumerArg("deadLetters", "true");
          List<String[]> records = new ArrayList<>();
          for (int i = 0; i < 15; i++) {
            records.add(new String[] {"dup-" + i, "payload dup-" + i});
            records.add(new String[] {"dup-" + i, "payload dup-" + i});
            records.add(new String[] {"conflict-" + i, "payload A"});
            records.add(new String[] {"conflict-" + i, "payload B"});
            records.add(new String[] {"order-" + i, "payload " + i});
          }
          run.produceAll(records);
          run.watchOffsets();
          run.start("a", null);
          run.awaitDone(FINISH);
          Map<String, FaultRun.DeadLetter> dlt = run.deadLetters(Duration.ofSeconds(3));
          int conflicts = 0;
          for (FaultRun.Produced record : run.produced) {
            FaultRun.DeadLetter dead = dlt.get(FaultRun.coordinates(record));
            boolean secondPayload = record.value().equals("payload B");
            if (secondPayload && dead != null) {
              if ("DedupKeyConflictException".equals(dead.exceptionName())) {
                conflicts++;
                continue;
              }
            }
            if (secondPayload || dead != null) {
              run.violation("F12: " + record.key() + " (" + record.value() + ") misrouted");
            }
          }
          run.notes.add(
              conflicts
                  + " records with another payload dead-lettered as conflicts;"
                  + " 15 keys twice in a row applied once");
        });
  }

  /**
   * The plain consumer claims each poll at once; the Spring Boot consumer runs a record listener
   * here (its batch listener is F16's), which claims per record.
   */
  private static boolean batchedUnlessSpring(Target target) {
    return !target.spring();
  }

  private static void raw(
      FaultRun run,
      Map<String, String> expected,
      String label,
      String outcome,
      String value,
      List<Header> headers) {
    expected.put(label, outcome);
    run.produceRaw(
        label, null, value == null ? null : value.getBytes(StandardCharsets.UTF_8), headers);
  }

  private static Header header(String key) {
    return FaultRun.keyHeader(key.getBytes(StandardCharsets.UTF_8));
  }

  private static String abbreviate(String text) {
    if (text == null) {
      return "no message";
    }
    String line = text.replace('\n', ' ').replace('\u0000', '?');
    return line.length() > 140 ? line.substring(0, 140) + "..." : line;
  }
}
