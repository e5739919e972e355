package io.consumerdedup.faults;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.testing.ChildJvm;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * Share groups (KIP-932, Kafka queues): {@code DedupShareLoop} consumers in child JVMs, several per
 * partition. S1: a consumer killed (the JVM halted, as SIGKILL leaves it) in the handler of a key
 * it claimed; its record's lock runs out, another consumer acquires it, finds the key held under
 * the dead holder's lease and keeps the record acquired (renewed, no delivery counted) until the
 * lease runs out, then applies it: applied once, never archived unapplied with the broker's default
 * delivery count limit of 5. S2: three consumers of a topic whose keys come three times each,
 * mixed: each key applied once.
 */
class ShareFaultsTest {
  static final Duration LOCK = Duration.ofSeconds(2);
  static final Duration FINISH_TIMEOUT = Duration.ofSeconds(120);

  @Test
  void s1AConsumerKilledInItsHandlerLeavesItsRecordAppliedOnceNeverArchived() throws Exception {
    // A lease of eight locks: had the waiting copy been released at each try (1 s back-off at
    // most), it would have used up its five deliveries long before the lease ran out.
    FaultRun.Verdict verdict =
        Reliability.scenario(
            "S1 share consumer killed in its handler",
            "SEPARATE",
            true,
            LOCK.multipliedBy(8),
            run -> {
              run.shareGroup(LOCK);
              run.produce(30, "order-");
              ChildJvm killed = run.start("a", "KEY:halt:order-7");
              run.awaitCrash(killed, Duration.ofSeconds(60));
              run.notes.add("halted in the handler of order-7");
              run.start("b", null);
              run.awaitDone(FINISH_TIMEOUT);
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
}
