package io.consumerdedup.faults;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupAdmin;
import io.consumerdedup.core.DedupInProgressException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupAdmin;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.kafka.DedupPollLoop;
import io.consumerdedup.kafka.IdempotentRecordHandler;
import io.consumerdedup.kafka.KeyExtractors;
import io.consumerdedup.testing.ChildJvm;
import io.consumerdedup.testing.ReplyLosingStore;
import io.consumerdedup.testing.TcpProxy;
import io.consumerdedup.testing.TestKafka;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;

/**
 * Claims that go astray. F21: two poll loops in this JVM share one executor and hold copies of the
 * same keys (each key on both partitions) while the database refuses connections, so their claims
 * go unanswered again and again, and are taken up when it answers. F22: a claim whose reply was
 * lost after the commit is taken up by its redelivery near the end of its lease, under a handler
 * slower than a lease, while another consumer keeps trying the key. F23: an operator releases a key
 * whose holder (a consumer JVM in a slow handler) is alive and renewing. Each runs on MariaDB
 * ({@link MariaDbFaultsTest}) as well.
 */
class ClaimFaultsTest {
  static final Duration FINISH = Duration.ofSeconds(60);

  @Test
  void f21TwoLoopsSharingAnExecutorAfterUnansweredClaimsApplyEachKeyOnce() throws Exception {
    twoLoopsAfterUnansweredClaims(Target.PLAIN, 20);
  }

  /**
   * F21: {@code keys} keys, each produced to both partitions, consumed by two loops of one executor
   * while the database is unreachable; it comes back after both loops' claims went unanswered
   * twice, at a random point of their retries.
   */
  static void twoLoopsAfterUnansweredClaims(Target target, int keys) throws Exception {
    Duration lease = Duration.ofSeconds(3);
    Reliability.scenario(
        target,
        "F21 two loops after an unanswered claim",
        "SEPARATE",
        true,
        lease,
        run -> {
          TcpProxy proxy = run.proxy();
          Map<String, AtomicInteger> unanswered = new ConcurrentHashMap<>();
          AtomicInteger inProgress = new AtomicInteger();
          AtomicInteger duplicates = new AtomicInteger();
          DedupListener counting =
              new DedupListener() {
                @Override
                public void storeFailed(DedupKey key, DedupStoreException error) {
                  unanswered
                      .computeIfAbsent(Thread.currentThread().getName(), n -> new AtomicInteger())
                      .incrementAndGet();
                }

                @Override
                public void inProgress(DedupKey key, DedupRecord existing) {
                  inProgress.incrementAndGet();
                }

                @Override
                public void duplicate(DedupKey key, DedupRecord existing) {
                  duplicates.incrementAndGet();
                }
              };
          List<String[]> records = new ArrayList<>();
          for (int i = 0; i < keys; i++) {
            records.add(new String[] {"twice-" + i, "payload of twice-" + i});
          }
          run.produceAllTo(0, records);
          run.produceAllTo(1, records);
          run.watchOffsets();
          try (HikariDataSource dedup =
                  FaultConsumer.pool(
                      // An outage holds records within a second instead of blocking for 30 s.
                      run.database.dedupUrl(run.schema, proxy), "f21-dedup", 6, 1_000);
              HikariDataSource effects = run.pool(4);
              IdempotentExecutor executor =
                  IdempotentExecutor.builder(
                          JdbcDedupStore.builder(dedup)
                              .retryInitialBackoff(Duration.ofMillis(100))
                              .retryMaxBackoff(Duration.ofMillis(500))
                              .retryMaxDuration(Duration.ofSeconds(2))
                              .build())
                      .lease(lease)
                      .listener(counting)
                      .build();
              Loops loops = new Loops(run)) {
            proxy.refuse();
            for (String name : List.of("loop-a", "loop-b")) {
              loops.start(name, executor, effects, Duration.ofMillis(250));
            }
            long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
            while (unansweredOf(unanswered, "loop-a") < 2
                || unansweredOf(unanswered, "loop-b") < 2) {
              if (System.nanoTime() > deadline) {
                run.violation(
                    "F21: the loops' claims did not go unanswered twice each: " + unanswered);
                break;
              }
              Thread.sleep(50);
            }
            Thread.sleep(Reliability.random(run.name).nextInt(1_500));
            proxy.pass();
            run.faultEnded();
            run.awaitDone(FINISH);
          }
          run.notes.add(
              "database refused while both loops held the keys: unanswered claims "
                  + unanswered
                  + ", then "
                  + inProgress
                  + " deliveries told in progress and "
                  + duplicates
                  + " duplicates");
          if (inProgress.get() + duplicates.get() == 0) {
            run.violation(
                "F21: no copy of a key met the other loop's claim: the race did not happen");
          }
        });
  }

  private static int unansweredOf(Map<String, AtomicInteger> unanswered, String loop) {
    AtomicInteger count = unanswered.get(loop);
    return count == null ? 0 : count.get();
  }

  @Test
  void f22AClaimTakenUpNearTheEndOfItsLeaseHoldsTheKeyThroughASlowHandler() throws Exception {
    claimTakenUpNearLeaseEnd(Target.PLAIN);
  }

  /**
   * F22: claims per record; the reply of a key's claim is lost after the commit; the record is held
   * for three quarters of the lease and delivered again; its claim is taken up by its id, and its
   * handler takes a whole lease while another consumer tries the key every 50 ms.
   */
  static void claimTakenUpNearLeaseEnd(Target target) throws Exception {
    Duration lease = Duration.ofSeconds(4);
    String slowKey = "slow-0";
    Reliability.scenario(
        target,
        "F22 claim recognised near lease end",
        "SEPARATE",
        false,
        lease,
        run -> {
          List<String[]> records = new ArrayList<>();
          records.add(new String[] {slowKey, "payload of " + slowKey});
          for (int i = 0; i < 4; i++) {
            records.add(new String[] {"order-" + i, "payload of order-" + i});
          }
          run.produceAllTo(0, records);
          run.watchOffsets();
          CountDownLatch slowStarted = new CountDownLatch(1);
          AtomicLong slowStartedAt = new AtomicLong();
          AtomicBoolean slowDone = new AtomicBoolean();
          int rivalRefused = 0;
          int rivalPastOldLease = 0;
          try (HikariDataSource dedup = run.pool(6);
              HikariDataSource effects = run.pool(4)) {
            JdbcDedupStore store = JdbcDedupStore.builder(dedup).build();
            ReplyLosingStore losing = ReplyLosingStore.in(store);
            try (IdempotentExecutor holder =
                    IdempotentExecutor.builder(losing.store())
                        .ownerId("holder")
                        .lease(lease)
                        .build();
                IdempotentExecutor rival =
                    IdempotentExecutor.builder(store).ownerId("rival").lease(lease).build();
                Loops loops = new Loops(run)) {
              losing.loseNextClaimReply();
              loops.start(
                  "holder",
                  holder,
                  effects,
                  lease.multipliedBy(3).dividedBy(4),
                  key -> {
                    if (key.equals(slowKey)) {
                      slowStartedAt.set(System.nanoTime());
                      slowStarted.countDown();
                      Thread.sleep(lease.toMillis());
                    }
                  },
                  key -> {
                    if (key.equals(slowKey)) {
                      slowDone.set(true);
                    }
                  });
              if (!slowStarted.await(60, TimeUnit.SECONDS)) {
                throw new AssertionError("the handler of " + slowKey + " never started");
              }
              DedupKey slow = DedupKey.of(FaultConsumer.BIZ_TYPE, slowKey);
              long oldLeaseEnd = losing.lastLossNanos() + lease.toNanos();
              while (!slowDone.get()) {
                if (System.nanoTime() > oldLeaseEnd) {
                  rivalPastOldLease++;
                }
                try {
                  rival.execute(
                      slow,
                      () -> {
                        FaultConsumer.writeEffect(effects, slowKey, "rival");
                        return null;
                      });
                } catch (DedupInProgressException expected) {
                  rivalRefused++;
                }
                Thread.sleep(50);
              }
              run.awaitDone(FINISH);
              long takenUpAfter = (slowStartedAt.get() - losing.lastLossNanos()) / 1_000_000;
              run.notes.add(
                  losing.repliesLost()
                      + " claim reply lost after the commit; "
                      + slowKey
                      + " taken up "
                      + takenUpAfter
                      + " ms later (lease "
                      + lease.toMillis()
                      + " ms), its handler a lease long; the rival tried it "
                      + rivalPastOldLease
                      + " times past the end of the lost claim's lease, told in progress "
                      + rivalRefused
                      + " times in all");
              if (losing.repliesLost() != 1) {
                run.violation("F22: " + losing.repliesLost() + " claim replies lost, not 1");
              }
              if (takenUpAfter < lease.toMillis() / 2) {
                run.violation("F22: the claim was taken up " + takenUpAfter + " ms after its loss");
              }
              if (rivalPastOldLease == 0) {
                run.violation("F22: the rival never tried the key after the old lease's end");
              }
            }
          }
        });
  }

  @Test
  void f23AReleaseOfALiveHolderIsRefusedAndTheKeyIsAppliedOnce() throws Exception {
    releaseOfALiveHolder(Target.PLAIN);
  }

  /**
   * F23: a consumer JVM's handler takes two leases; once its lease has been renewed, an operator
   * releases the key it holds (without force).
   */
  static void releaseOfALiveHolder(Target target) throws Exception {
    Duration lease = Duration.ofSeconds(2);
    Reliability.scenario(
        target,
        "F23 release of a live holder",
        "SEPARATE",
        false,
        lease,
        run -> {
          run.consumerArg("handlerMs", String.valueOf(lease.multipliedBy(2).toMillis()));
          run.produce(3, "order-");
          run.watchOffsets();
          ChildJvm holder = run.start("a", null);
          try (HikariDataSource pool = run.pool(2)) {
            DedupAdmin admin = JdbcDedupAdmin.of(JdbcDedupStore.builder(pool).build());
            DedupAdmin.RecordQuery live =
                new DedupAdmin.RecordQuery(
                    DedupStatus.PROCESSING,
                    FaultConsumer.BIZ_TYPE,
                    DedupAdmin.LeaseFilter.LIVE,
                    1,
                    null);
            long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
            List<DedupRecord> held = admin.list(live).records();
            while (held.isEmpty() && System.nanoTime() < deadline) {
              Thread.sleep(50);
              held = admin.list(live).records();
            }
            if (held.isEmpty()) {
              throw new AssertionError("no key was held; holder output:\n" + holder.output());
            }
            // Past the claim's own lease: the key is held by renewals of a live holder.
            Thread.sleep(lease.plusMillis(500).toMillis());
            DedupAdmin.Change change = admin.release(held.get(0).key(), "f23-operator");
            DedupRecord before = change.before();
            if (before == null
                || before.status() != DedupStatus.PROCESSING
                || !before.isLeaseLive()
                || !before.updatedAt().isAfter(before.createdAt())) {
              run.violation(
                  "F23: the release did not meet a live, renewed lease (the fault did not happen): "
                      + before);
            }
            if (change.applied()) {
              run.violation("F23: the live holder's key was released: " + change.message());
            } else {
              run.notes.add(
                  "release of "
                      + held.get(0).key().bizKey()
                      + " refused while its holder renewed it: \""
                      + change.message().substring(0, Math.min(120, change.message().length()))
                      + "...\"");
            }
          }
          run.faultEnded();
          run.awaitDone(FINISH);
        });
  }

  // ---- poll loops in this JVM

  /** What a handler does with the record's key before and after its effect. */
  @FunctionalInterface
  interface KeyStep {
    void run(String key) throws Exception;
  }

  /** The poll loops a scenario runs in this JVM, on threads named after them; closed with it. */
  static final class Loops implements AutoCloseable {
    private final FaultRun run;
    private final List<DedupPollLoop<String, String>> loops = new ArrayList<>();
    private final List<Thread> threads = new ArrayList<>();

    Loops(FaultRun run) {
      this.run = run;
    }

    void start(String name, IdempotentExecutor executor, DataSource effects, Duration hold) {
      start(name, executor, effects, hold, key -> {}, key -> {});
    }

    /**
     * A loop of the run's group on its topic, applying each key as an effect row of {@code name}
     * between {@code before} and {@code after}; a held record waits {@code hold}.
     */
    void start(
        String name,
        IdempotentExecutor executor,
        DataSource effects,
        Duration hold,
        KeyStep before,
        KeyStep after) {
      IdempotentRecordHandler<String, String> handler =
          IdempotentRecordHandler.<String, String>builder(executor)
              .bizType(FaultConsumer.BIZ_TYPE)
              .key(KeyExtractors.header(FaultConsumer.KEY_HEADER))
              .groupId(run.group)
              .claimsPerPoll(run.batched)
              .handler(
                  record -> {
                    String key = FaultConsumer.keyOf(record);
                    before.run(key);
                    FaultConsumer.writeEffect(effects, key, name);
                    after.run(key);
                  })
              .build();
      Map<String, Object> config = TestKafka.consumerConfig(run.group);
      config.put("max.poll.records", 50);
      DedupPollLoop<String, String> loop =
          DedupPollLoop.builder(config, List.of(run.topic), handler)
              .deadLetterHandler(
                  (record, reason) ->
                      run.violation(
                          name + " dead-lettered " + FaultConsumer.keyOf(record) + ": " + reason))
              .holdBackOff(hold, hold)
              .build();
      Thread thread =
          new Thread(
              () -> {
                try {
                  loop.run();
                } catch (RuntimeException | Error e) {
                  run.violation(name + " ended with " + e);
                }
              },
              name);
      loops.add(loop);
      threads.add(thread);
      thread.start();
    }

    @Override
    public void close() throws InterruptedException {
      loops.forEach(DedupPollLoop::close);
      for (Thread thread : threads) {
        thread.join(10_000);
      }
    }
  }
}
