package io.consumerdedup.faults;

import static org.assertj.core.api.Assertions.assertThat;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.ChildJvm;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.utils.Utils;
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

  /** {@code max.poll.records} of {@link SpringFaultConsumer}. */
  private static final int MAX_POLL = 50;

  @Test
  void f1KillAfterTheListenersEffectReRunsExactlyThatRecordWhenClaimingPerRecord()
      throws Exception {
    FaultRun.Verdict verdict =
        CrashFaultsTest.crashes(
            SPRING,
            "F1 kill after handler, claims per record",
            "SEPARATE",
            false,
            "AFTER_HANDLER",
            1,
            RECORDS,
            run -> run.consumerArg("claimsPerPoll", "false"));
    // The listener's effect was applied and its SUCCESS never written: that record, no other.
    assertThat(verdict.window()).isEqualTo(1);
    assertThat(verdict.duplicates()).isEqualTo(1);
  }

  /**
   * Claims per poll (the default): the SUCCESS marks are written in the background, in groups, so a
   * kill right after an effect leaves the records applied since the last mark write that finished
   * without SUCCESS. The dedup connections take 100 ms a round trip, so several effects are applied
   * while a mark write is on its way. Each of them runs once more, no other; they are records of
   * the poll in hand, as the commit before the next poll waits for the marks.
   */
  @Test
  void f1KillAfterHandlersWhoseGroupedMarksAreOnTheirWayReRunsThoseRecordsOnly() throws Exception {
    FaultRun.Verdict verdict =
        CrashFaultsTest.crashes(
            SPRING,
            "F1 kill after handlers, marks on their way",
            "SEPARATE",
            false,
            "AFTER_HANDLER",
            1,
            RECORDS,
            run -> run.proxy().latency(Duration.ofMillis(50)));
    assertThat(verdict.kills()).isEqualTo(1);
    assertThat(verdict.window()).as("applied without SUCCESS at the kill").isBetween(1, MAX_POLL);
    assertThat(verdict.duplicates()).isEqualTo(verdict.window());
  }

  @Test
  void f2KillAfterSuccessBeforeTheOffsetCommitReAppliesNothingWhenClaimingPerRecord()
      throws Exception {
    FaultRun.Verdict verdict =
        CrashFaultsTest.crashes(
            SPRING,
            "F2 kill after SUCCESS, claims per record",
            "SEPARATE",
            false,
            "AFTER_SUCCESS_MARK",
            1,
            RECORDS,
            run -> run.consumerArg("claimsPerPoll", "false"));
    assertThat(verdict.duplicates()).isZero();
  }

  /**
   * Claims per poll: killed once the grouped SUCCESS marks of the polls before are durable, before
   * the commit that passes them is sent and before the next poll's first listener runs (its keys
   * claimed); those records come again as duplicates and nothing runs twice. 150 records, so that
   * there are polls after the first.
   */
  @Test
  void f2KillAfterTheMarksAreDurableBeforeTheOffsetCommitReAppliesNothing() throws Exception {
    FaultRun.Verdict verdict =
        CrashFaultsTest.crashes(
            SPRING,
            "F2 kill after the marks, before the offset commit",
            "SEPARATE",
            false,
            "BEFORE_OFFSET_COMMIT",
            1,
            150);
    assertThat(verdict.kills()).isEqualTo(1);
    assertThat(verdict.window()).isZero();
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
          Map<String, Long> committed = FaultRun.receipts(output, "read_committed");
          Map<String, Long> all = FaultRun.receipts(output, "read_uncommitted");
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

  /**
   * F24: a listener returning a {@code CompletableFuture} whose future fails once (a {@code flaky-}
   * key), with the application's {@code DefaultErrorHandler} backing off 8 s between attempts, and
   * the consumer stopped during that back-off and started again (a deploy). The failed record must
   * be applied after the restart: not committed past while FAILED.
   */
  @Test
  void f24AsyncFailureWithRestart() throws Exception {
    FaultRun.Verdict verdict =
        Reliability.scenario(
            SPRING,
            "F24 async failure with restart",
            "SEPARATE",
            false,
            CrashFaultsTest.LEASE,
            run -> {
              run.consumerArg("async", "true");
              run.consumerArg("retryBackOffMs", "8000");
              List<String[]> records = new ArrayList<>();
              for (int i = 0; i < 20; i++) {
                records.add(new String[] {(i == 7 ? "flaky-" : "order-") + i, "payload " + i});
              }
              run.produceAll(records);
              run.watchOffsets();
              ChildJvm first = run.start("a", null);
              // The fault: a future failed, and its key is FAILED, waiting out the back-off.
              awaitAtLeast(run, "SELECT count(*) FROM consumer_dedup WHERE status = 'FAILED'", 1);
              run.stop(first);
              // Read after the stop: the key must still have been waiting out its back-off, or
              // the restart fell after the retry and tested nothing.
              long failedAtStop =
                  run.queryLong("SELECT count(*) FROM consumer_dedup WHERE status = 'FAILED'");
              if (failedAtStop == 0) {
                run.violation("F24: the failed key was retried before the stop");
              }
              run.faultEnded();
              run.start("a", null);
              run.awaitDone(CrashFaultsTest.FINISH_TIMEOUT);
              long retried =
                  run.queryLong(
                      "SELECT count(*) FROM consumer_dedup WHERE biz_key LIKE 'flaky-%'"
                          + " AND status = 'SUCCESS' AND attempts >= 2");
              run.notes.add(
                  failedAtStop
                      + " failed futures FAILED when the consumer was stopped during the back-off;"
                      + " "
                      + retried
                      + " flaky- key applied on its attempt after the restart");
              if (retried != 1) {
                run.violation("F24: the flaky- key was not applied after failing");
              }
            });
    assertThat(verdict.lost()).isZero();
    assertThat(verdict.duplicates()).isZero();
  }

  /**
   * F25: a batch listener on the defaults whose own exception (a {@code flaky-} key, once) makes
   * spring-kafka retry the batch in memory, while a later key of the same batch is held by another
   * consumer's live lease: every retry stops at the held key, which must wait, not be counted as a
   * failure until the recoverer discards the batch. It is applied once after the holder lets go.
   */
  @Test
  void f25BatchInMemoryRetryWithAHeldKey() throws Exception {
    FaultRun.Verdict verdict =
        Reliability.scenario(
            SPRING,
            "F25 batch in-memory retry with a held key",
            "SEPARATE",
            true,
            CrashFaultsTest.LEASE,
            run -> {
              // One partition, so one batch: the flaky key first (the listener applies nothing
              // before it fails, which a batch listener failing without an index would re-apply),
              // then the held one, then the others.
              String flaky = keysInPartition("flaky-", 0, 1).get(0);
              String held = keysInPartition("held-", 0, 1).get(0);
              List<String> keys = new ArrayList<>(List.of(flaky, held));
              keys.addAll(keysInPartition("order-", 0, 18));
              try (OtherConsumerHold holder = new OtherConsumerHold(run, held)) {
                run.produceKeys(keys);
                run.watchOffsets();
                run.start("a", null);
                // The listener failed once and its in-memory retry applied the flaky key, while
                // the held key's lease is live elsewhere.
                awaitAtLeast(
                    run,
                    "SELECT count(*) FROM consumer_dedup WHERE biz_key = '"
                        + flaky
                        + "' AND status = 'SUCCESS' AND attempts = 2",
                    1);
                Thread.sleep(3_000); // longer than the default handler's ten quick retries
                String heldState =
                    run.queryLong(
                                "SELECT count(*) FROM consumer_dedup WHERE biz_key = '"
                                    + held
                                    + "' AND status = 'PROCESSING' AND owner = 'other-consumer'")
                            == 1
                        ? "held by the other consumer"
                        : "not held";
                run.notes.add(
                    flaky
                        + " failed once and was applied by the in-memory retry while "
                        + held
                        + " was "
                        + heldState);
                if (!heldState.startsWith("held")) {
                  run.violation("F25: the held key was not held during the in-memory retries");
                }
                holder.giveUp();
                run.faultEnded();
              }
              run.awaitDone(CrashFaultsTest.FINISH_TIMEOUT);
            });
    assertThat(verdict.lost()).isZero();
    assertThat(verdict.duplicates()).isZero();
  }

  /**
   * F27, a rebalance in the middle of a poll: consumer a claims a poll of both partitions and
   * stalls in the middle of it for longer than {@code max.poll.interval.ms} and the session
   * timeout, so Kafka gives its partitions to consumer b, which reads them from the last commit
   * while a still holds the claims of the records it has not reached; a then wakes and applies
   * them. b must wait for a's keys (told they are in progress), and nothing may run twice.
   */
  @Test
  void f27RebalanceInTheMiddleOfAPoll() throws Exception {
    FaultRun.Verdict verdict =
        Reliability.scenario(
            SPRING,
            "F27 rebalance in the middle of a poll",
            "SEPARATE",
            false,
            CrashFaultsTest.LEASE,
            run -> {
              run.consumerArg("maxPollIntervalMs", "4000");
              run.produce(RECORDS, "order-");
              run.watchOffsets();
              int nth = 3 + Reliability.random(run.name).nextInt(10);
              ChildJvm a = run.start("a", "AFTER_HANDLER:stall16000:" + nth);
              awaitOutput(a, "FAULT AFTER_HANDLER stall");
              long stallEnds = System.nanoTime() + Duration.ofSeconds(16).toNanos();
              ChildJvm b = run.start("b", null);
              // a stays stalled until b has met its claims (or for the whole 16 s it once always
              // took); then it goes on with its poll while b holds those keys.
              while (!b.output().contains("is in progress elsewhere")
                  && System.nanoTime() < stallEnds) {
                Thread.sleep(100);
              }
              if (a.isAlive()) {
                a.send("resume");
              }
              awaitOutput(a, "RESUMED AFTER_HANDLER");
              run.faultEnded();
              run.awaitDone(CrashFaultsTest.FINISH_TIMEOUT);
              boolean metClaims = b.output().contains("is in progress elsewhere");
              long appliedByA =
                  run.queryLong("SELECT count(*) FROM effects WHERE consumer LIKE 'a-%'");
              run.notes.add(
                  "a stalled after its "
                      + nth
                      + "th effect past max.poll.interval.ms; b "
                      + (metClaims ? "was told a's keys were in progress" : "never met a's keys")
                      + "; a applied "
                      + appliedByA
                      + " records, b "
                      + (run.produced.size() - appliedByA));
              if (!metClaims) {
                run.violation("F27: b never met the claims a held in the middle of its poll");
              }
            });
    assertThat(verdict.duplicates()).isZero();
  }

  /**
   * F28, a key in progress in the middle of a poll: another consumer holds a key between records of
   * one partition. The records before it are applied; it is held, and the claims of the records
   * after it, made with the poll's, are given back rather than left PROCESSING; once the holder
   * fails, everything is applied once.
   */
  @Test
  void f28KeyInProgressInTheMiddleOfAPoll() throws Exception {
    FaultRun.Verdict verdict =
        Reliability.scenario(
            SPRING,
            "F28 key in progress in the middle of a poll",
            "SEPARATE",
            false,
            CrashFaultsTest.LEASE,
            run -> {
              List<String> before = keysInPartition("before-", 0, 5);
              String held = keysInPartition("held-", 0, 1).get(0);
              List<String> after = keysInPartition("after-", 0, 15);
              List<String> keys = new ArrayList<>(before);
              keys.add(held);
              keys.addAll(after);
              keys.addAll(keysInPartition("other-", 1, 20));
              try (OtherConsumerHold holder = new OtherConsumerHold(run, held)) {
                run.produceKeys(keys);
                run.watchOffsets();
                ChildJvm a = run.start("a", null);
                awaitAtLeast(
                    run,
                    "SELECT count(*) FROM consumer_dedup WHERE biz_key LIKE 'before-%'"
                        + " AND status = 'SUCCESS'",
                    before.size());
                awaitOutput(a, "is in progress elsewhere");
                long strayProcessing = 0;
                long appliedAfter = 0;
                for (int i = 0; i < 10; i++) {
                  Thread.sleep(300);
                  // The records after the held key were claimed with the poll; the other
                  // partition's records, applied meanwhile, are PROCESSING until their marks land.
                  strayProcessing +=
                      run.queryLong(
                          "SELECT count(*) FROM consumer_dedup WHERE status = 'PROCESSING'"
                              + " AND biz_key LIKE 'after-%'");
                  appliedAfter +=
                      run.queryLong(
                          "SELECT count(*) FROM effects WHERE biz_key LIKE 'after-%'"
                              + " OR biz_key = ?",
                          held);
                }
                run.notes.add(
                    held
                        + " held by the other consumer after the 5 records before it; "
                        + strayProcessing
                        + " PROCESSING rows of the records after it and "
                        + appliedAfter
                        + " effects of the held record or those after it seen in 10 looks while"
                        + " it was held");
                if (strayProcessing > 0) {
                  run.violation("F28: claims of the poll left PROCESSING while a key was held");
                }
                if (appliedAfter > 0) {
                  run.violation("F28: records at or after the held key applied while it was held");
                }
                holder.giveUp();
                run.faultEnded();
              }
              run.awaitDone(CrashFaultsTest.FINISH_TIMEOUT);
            });
    assertThat(verdict.lost()).isZero();
    assertThat(verdict.duplicates()).isZero();
  }

  /**
   * Another consumer's live claim of one key (owner {@code other-consumer}, the suite's lease), on
   * a pool of its own: the consumers under test are told the key is in progress elsewhere until
   * {@link #giveUp} fails it.
   */
  private static final class OtherConsumerHold implements AutoCloseable {
    private final HikariDataSource pool;
    private final IdempotentExecutor executor;
    private final DedupClaim claim;

    OtherConsumerHold(FaultRun run, String key) {
      pool = run.pool(2);
      try {
        executor =
            IdempotentExecutor.builder(JdbcDedupStore.builder(pool).build())
                .ownerId("other-consumer")
                .lease(CrashFaultsTest.LEASE)
                .build();
        try {
          claim = executor.claim(DedupKey.of(FaultConsumer.BIZ_TYPE, key), null, "other consumer");
        } catch (RuntimeException e) {
          executor.close();
          throw e;
        }
      } catch (RuntimeException e) {
        pool.close();
        throw e;
      }
    }

    void giveUp() {
      claim.fail(new IllegalStateException("the other consumer gave up"));
    }

    @Override
    public void close() {
      try {
        executor.close();
      } finally {
        pool.close();
      }
    }
  }

  /** Waits until {@code child} has printed {@code text}. */
  private static void awaitOutput(ChildJvm child, String text) throws InterruptedException {
    long deadline = System.nanoTime() + CrashFaultsTest.CRASH_TIMEOUT.toNanos();
    while (!child.output().contains(text)) {
      if (System.nanoTime() > deadline) {
        throw new AssertionError(
            "not printed within " + CrashFaultsTest.CRASH_TIMEOUT + ": " + text);
      }
      Thread.sleep(100);
    }
  }

  /**
   * {@code count} keys with {@code prefix} that Kafka's default partitioner puts in one partition.
   */
  private static List<String> keysInPartition(String prefix, int partition, int count) {
    List<String> keys = new ArrayList<>();
    for (int i = 0; keys.size() < count; i++) {
      byte[] key = (prefix + i).getBytes(StandardCharsets.UTF_8);
      if (Utils.toPositive(Utils.murmur2(key)) % FaultRun.PARTITIONS == partition) {
        keys.add(prefix + i);
      }
    }
    return keys;
  }

  private static void awaitAtLeast(FaultRun run, String countQuery, long atLeast)
      throws InterruptedException {
    long deadline = System.nanoTime() + CrashFaultsTest.CRASH_TIMEOUT.toNanos();
    while (run.queryLong(countQuery) < atLeast) {
      if (System.nanoTime() > deadline) {
        throw new AssertionError(
            "not reached within " + CrashFaultsTest.CRASH_TIMEOUT + ": " + countQuery);
      }
      Thread.sleep(100);
    }
  }
}
