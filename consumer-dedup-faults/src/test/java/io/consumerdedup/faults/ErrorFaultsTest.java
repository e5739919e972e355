package io.consumerdedup.faults;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.testing.ChildJvm;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * Errors, not exceptions, inside a consumer: F19 a handler throws a {@link StackOverflowError} on
 * some keys (the application replaces the loop that ended with it, in the same JVM, on the same
 * executor); F20 the thread that writes the SUCCESS marks of a poll meets an {@link
 * OutOfMemoryError} after a write. Nothing may be lost, applied twice, or left PROCESSING.
 */
class ErrorFaultsTest {
  static final Duration LEASE = Duration.ofSeconds(3);
  static final Duration FINISH_TIMEOUT = Duration.ofSeconds(90);
  static final int RECORDS = 80;

  /** Every tenth key, starting with the sixth, throws an Error from its handler once. */
  static final int ERROR_KEYS = RECORDS / 10;

  static FaultRun.Verdict handlerErrors(boolean batched) throws Exception {
    return Reliability.scenario(
        "F19 handler throws an Error",
        "SEPARATE",
        batched,
        LEASE,
        run -> {
          List<String[]> records = new ArrayList<>();
          for (int i = 0; i < RECORDS; i++) {
            String key = (i % 10 == 5 ? "error-" : "order-") + i;
            records.add(new String[] {key, "payload of " + key});
          }
          run.produceAll(records);
          run.watchOffsets();
          ChildJvm consumer = run.start("a", null);
          run.awaitDone(FINISH_TIMEOUT);
          long ended = consumer.output().lines().filter(l -> l.startsWith("LOOP ENDED")).count();
          run.notes.add(ended + " loop(s) ended by an Error and replaced in the same JVM");
          if (ended != ERROR_KEYS) {
            run.violation("F19: " + ended + " loops ended by an Error, expected " + ERROR_KEYS);
          }
          // Each Error counted an attempt (FAILED), and the next loop applied the key.
          long retried =
              run.queryLong(
                  "SELECT count(*) FROM consumer_dedup WHERE biz_key LIKE 'error-%'"
                      + " AND status = 'SUCCESS' AND attempts = 2");
          run.notes.add(retried + " key(s) FAILED by the Error, then applied");
          if (retried != ERROR_KEYS) {
            run.violation("F19: " + retried + " error keys applied on their second attempt");
          }
        });
  }

  @Test
  void f19AHandlerErrorEndsTheLoopWithoutStrandingThePollBatched() throws Exception {
    FaultRun.Verdict verdict = handlerErrors(true);
    assertThat(verdict.duplicates()).isZero();
    assertThat(verdict.lost()).isZero();
  }

  @Test
  void f19AHandlerErrorEndsTheLoopWithoutStrandingThePollPerRecord() throws Exception {
    FaultRun.Verdict verdict = handlerErrors(false);
    assertThat(verdict.duplicates()).isZero();
    assertThat(verdict.lost()).isZero();
  }

  @Test
  void f20AnErrorOnTheOutcomeWriterThreadDoesNotStopTheConsumer() throws Exception {
    FaultRun.Verdict verdict =
        Reliability.scenario(
            "F20 outcome writer dies",
            "SEPARATE",
            true,
            LEASE,
            run -> {
              run.produce(RECORDS, "order-");
              run.watchOffsets();
              // After the n-th write of a group of SUCCESS marks, on the writer thread, before the
              // marks are settled: written in the table, their waiters not told.
              int nth = 2 + Reliability.random(run.name).nextInt(5);
              ChildJvm consumer = run.start("a", "AFTER_SUCCESS_MARK:error:" + nth);
              run.awaitDone(FINISH_TIMEOUT);
              if (!consumer.output().contains("FAULT AFTER_SUCCESS_MARK error")) {
                run.violation("F20: the writer never met its Error");
              }
              if (!consumer.isAlive()) {
                run.violation("F20: the consumer died");
              }
              run.notes.add("Error on the writer after mark write #" + nth);
            });
    assertThat(verdict.duplicates()).isZero();
  }
}
