package io.consumerdedup.faults;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.testing.TestKafka;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;

/**
 * The faults of the other classes through a Spring Boot {@code @Idempotent @KafkaListener} on the
 * auto-configured defaults ({@link SpringFaultConsumer}), with the same invariants: a record
 * listener in mode SEPARATE unless a test says otherwise. Where records must end on a dead-letter
 * topic (F10-F13, bad input) the application has the error handler docs/spring-boot.md shows; F14
 * and F15 are about the store's clock and concurrency, which no listener changes, and run on the
 * plain consumer only.
 */
class SpringFaultsTest {
  private static final Target SPRING = Target.SPRING;
  private static final int RECORDS = 60;

  @Test
  void f1KillAfterTheListenersEffectReRunsExactlyThatRecord() throws Exception {
    FaultRun.Verdict verdict =
        CrashFaultsTest.crashes(
            SPRING, "F1 kill after handler", "SEPARATE", false, "AFTER_HANDLER", 1, RECORDS);
    // The listener's effect was applied and its SUCCESS never written: that record, no other.
    assertThat(verdict.window()).isEqualTo(1);
    assertThat(verdict.duplicates()).isEqualTo(1);
  }

  @Test
  void f2KillAfterSuccessBeforeTheOffsetCommitReAppliesNothing() throws Exception {
    FaultRun.Verdict verdict =
        CrashFaultsTest.crashes(
            SPRING, "F2 kill after SUCCESS", "SEPARATE", false, "AFTER_SUCCESS_MARK", 1, RECORDS);
    assertThat(verdict.duplicates()).isZero();
  }

  @Test
  void f3KillAfterTheClaimIsTakenOverOnceTheLeaseRunsOut() throws Exception {
    FaultRun.Verdict verdict =
        CrashFaultsTest.crashes(
            SPRING, "F3 kill after claim", "SEPARATE", false, "AFTER_CLAIM", 1, RECORDS);
    assertThat(verdict.duplicates()).isZero();
  }

  @Test
  void f4f18AZombieListenerLosesItsLeaseAndItsLateSuccessIsRefused() throws Exception {
    DatabaseFaultsTest.zombie(SPRING, 40);
  }

  @Test
  void f5BouncesRollingAndAllAtOnce() throws Exception {
    GroupFaultsTest.bounces(SPRING, 150);
  }

  @Test
  void f6f7RepliesOfClaimsAndMarksLostAfterTheCommitAndConnectionsCut() throws Exception {
    DatabaseFaultsTest.repliesLostAndConnectionsCut(SPRING, RECORDS, Duration.ofSeconds(4));
  }

  @Test
  void f8DatabaseUnreachableForSecondsHoldsRecordsAndAppliesThemOnceAfterwards() throws Exception {
    DatabaseFaultsTest.databaseUnreachable(SPRING, false, 100, 5_000);
  }

  @Test
  void f9TwoHundredMillisecondsMoreOnEveryRoundTrip() throws Exception {
    DatabaseFaultsTest.latency(SPRING, 30);
  }

  @Test
  void f10f11PoisonAndTransientFailuresWhileThePartitionsMove() throws Exception {
    InputFaultsTest.poisonAndTransientFailures(SPRING);
  }

  @Test
  void f12f13AnotherPayloadIsAConflictAndAKeyTwiceInARowIsADuplicate() throws Exception {
    InputFaultsTest.conflictsAndDuplicates(SPRING);
  }

  @Test
  void f16KillInTheMiddleOfAPollTransactionalListener() throws Exception {
    FaultRun.Verdict verdict =
        CrashFaultsTest.crashes(
            SPRING, "F16 kill mid-batch", "TRANSACTIONAL", false, "AFTER_HANDLER", 1, RECORDS);
    assertThat(verdict.kills()).isEqualTo(1);
    assertThat(verdict.duplicates()).isZero();
  }

  @Test
  void f16KillInTheMiddleOfABatchListenersBatch() throws Exception {
    FaultRun.Verdict verdict =
        CrashFaultsTest.crashes(
            SPRING, "F16 kill mid-batch", "SEPARATE", true, "AFTER_HANDLER", 1, RECORDS);
    // The batch's effects before the kill have no SUCCESS yet (marks are written when the batch
    // returns): each is re-run once, and no more than those.
    assertThat(verdict.kills()).isEqualTo(1);
    assertThat(verdict.duplicates()).isEqualTo(verdict.window());
  }

  /**
   * F17, consume-process-produce: each record in a Kafka transaction of the container, its effect a
   * receipt produced in that transaction. The transactions of ten keys abort after the listener
   * returned (the broker refuses a record they sent), and a consumer is killed with a transaction
   * open; each key's receipt must be committed exactly once, read as a {@code read_committed}
   * consumer reads it.
   */
  @Test
  void f17KafkaTransactionsThatAbortAfterTheListenerReturnedCommitTheirOutputOnce()
      throws Exception {
    Reliability.scenario(
        SPRING,
        "F17 Kafka transactions aborted",
        "SEPARATE",
        false,
        CrashFaultsTest.LEASE,
        run -> {
          String output = run.topic + "-receipts";
          String audit = run.topic + "-audit";
          TestKafka.createTopics(1, output);
          TestKafka.createTopic(audit, 1, Map.of("max.message.bytes", "200"));
          run.consumerArg("output", output);
          run.consumerArg("audit", audit);
          List<String[]> records = new ArrayList<>();
          for (int i = 0; i < 30; i++) {
            records.add(new String[] {(i % 3 == 0 ? "abort-" : "order-") + i, "payload " + i});
          }
          run.produceAll(records);
          run.watchOffsets();
          int nth = 5 + Reliability.random(run.name).nextInt(15);
          run.awaitCrash(
              run.start("a", "AFTER_HANDLER:halt:" + nth), CrashFaultsTest.CRASH_TIMEOUT);
          run.start("a", null);
          run.awaitDone(CrashFaultsTest.FINISH_TIMEOUT);
          Map<String, Long> committed = receipts(output, "read_committed");
          Map<String, Long> all = receipts(output, "read_uncommitted");
          for (FaultRun.Produced record : run.produced) {
            long receipts = committed.getOrDefault(record.key(), 0L);
            if (receipts != 1) {
              run.violation("F17: " + record.key() + " has " + receipts + " committed receipts");
            }
          }
          long aborted =
              all.values().stream().mapToLong(Long::longValue).sum()
                  - committed.values().stream().mapToLong(Long::longValue).sum();
          // The faults were real: every abort- key's first transaction failed after the listener
          // returned, and was retried (a receipt the producer had not sent yet when its
          // transaction failed never reaches the log, so the aborted receipts count fewer).
          long retried =
              run.queryLong(
                  "SELECT count(*) FROM consumer_dedup WHERE biz_key LIKE 'abort-%'"
                      + " AND attempts >= 2");
          run.notes.add(
              "killed after its "
                  + nth
                  + "th receipt; the transactions of "
                  + retried
                  + " keys failed to commit after the listener returned and were retried; "
                  + aborted
                  + " aborted receipts in the log; each key's receipt committed once");
          if (retried != 10) {
            run.violation(
                "F17: " + retried + " of the 10 abort- keys were retried after a failed commit");
          }
        });
  }

  /** The receipts on {@code topic} per key, as a consumer of {@code isolation} reads them. */
  private static Map<String, Long> receipts(String topic, String isolation) {
    Map<String, Object> config = TestKafka.consumerConfig("unused");
    config.remove(ConsumerConfig.GROUP_ID_CONFIG);
    config.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
    Map<String, Long> perKey = new HashMap<>();
    TopicPartition partition = new TopicPartition(topic, 0);
    try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(config)) {
      consumer.assign(List.of(partition));
      consumer.seekToBeginning(List.of(partition));
      // Under read_committed the end is the last stable offset: no open transaction is waited for.
      long end = consumer.endOffsets(List.of(partition)).get(partition);
      long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
      while (consumer.position(partition) < end && System.nanoTime() < deadline) {
        consumer.poll(Duration.ofMillis(200)).forEach(r -> perKey.merge(r.key(), 1L, Long::sum));
      }
    }
    return perKey;
  }

  @Test
  void f16KillInTheMiddleOfABatchListenerAcknowledgingEachRecord() throws Exception {
    FaultRun.Verdict verdict =
        CrashFaultsTest.crashes(
            SPRING,
            "F16 kill mid-batch, acknowledging each record",
            "SEPARATE",
            true,
            "AFTER_HANDLER",
            1,
            RECORDS,
            run -> run.consumerArg("acknowledge", "true"));
    // Acknowledged records had their SUCCESS written as the batch went: only the record in hand
    // and marks still on their way are re-run.
    assertThat(verdict.kills()).isEqualTo(1);
    assertThat(verdict.duplicates()).isEqualTo(verdict.window());
  }

  @Test
  void badInputEndsProcessedOnceOrDeadLetteredWithTheReason() throws Exception {
    InputFaultsTest.badInput(SPRING);
  }
}
