package io.consumerdedup.kafka;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.FaultyDataSource;
import io.consumerdedup.testing.TestKafka;
import io.consumerdedup.testing.TestShareGroups;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.OptionalInt;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * {@link DedupShareLoop} while PostgreSQL refuses connections for several acquisition locks (a
 * database restarting, a failover): each record is acquired under a lock the broker counts a
 * delivery for when it is released or runs out, and archives unapplied after the fifth. The outage
 * is real: the store's connections run through a proxy that resets them and refuses new ones.
 */
class DedupShareLoopStoreOutageTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("share_outage");

  /** Renewed every third of it: 1.3 s of slack for a loaded machine, as in DedupShareLoopTest. */
  private static final Duration LOCK = Duration.ofSeconds(2);

  /** Four locks: a record left to its lock, or released at each failed claim, spends them all. */
  private static final Duration OUTAGE = LOCK.multipliedBy(4);

  private static final Duration WAIT = Duration.ofSeconds(60);

  private final List<DedupShareLoop<String, String>> loops = new CopyOnWriteArrayList<>();
  private final List<IdempotentExecutor> executors = new CopyOnWriteArrayList<>();
  private final ExecutorService threads = Executors.newCachedThreadPool();
  private final KafkaProducer<String, String> dltProducer = TestKafka.producer();
  private FaultyDataSource faulty;

  /** Handler runs that returned, by order number. */
  private final Map<String, AtomicInteger> applied = new ConcurrentHashMap<>();

  /** Each delivery offered to a loop's processor, as "value/delivery count". */
  private final List<String> offered = new CopyOnWriteArrayList<>();

  /** The loops (by the number {@link #start} gave them) each value was offered to. */
  private final Map<String, Set<Integer>> offeredTo = new ConcurrentHashMap<>();

  /** When each value was first offered to a loop's processor, in nanoseconds. */
  private final Map<String, Long> firstOffered = new ConcurrentHashMap<>();

  /** Offers whose processing threw (the store unreachable), by value. */
  private final Map<String, AtomicInteger> refused = new ConcurrentHashMap<>();

  private String topic;
  private String group;

  @BeforeEach
  void queue() {
    topic = fixture.topic();
    group = fixture.group();
    TestKafka.createTopics(1, topic, topic + "-dlt");
    TestShareGroups.configure(group, LOCK, Duration.ofSeconds(1));
    // A connection waited for longer than the lock: the claim blocks past it, the loop's own
    // thread alone renewing the record meanwhile. Each wait costs the test as much again (the
    // store's table check, each try of a claim), so not longer than that.
    faulty = FaultyDataSource.on(fixture.schema(), 4, LOCK.plusSeconds(1));
  }

  @AfterEach
  void stop() {
    loops.forEach(DedupShareLoop::close);
    threads.shutdownNow();
    executors.forEach(IdempotentExecutor::close);
    dltProducer.close();
    faulty.close();
  }

  @Test
  void aRecordWhoseClaimWaitsForTheDatabasePastItsLockIsAppliedOnItsFirstDelivery()
      throws Exception {
    faulty.proxy().refuse();
    long downSince = System.nanoTime();
    start(record -> apply(record));
    send("down-1", "claimed while the database is down");

    await()
        .atMost(WAIT)
        .alias("the record's claim refused")
        .until(() -> refusals("claimed while the database is down") > 0);
    sleepUntil(downSince + OUTAGE.toNanos());
    assertThat(applied).as("applied while the database was down").isEmpty();
    faulty.proxy().pass();

    await().atMost(WAIT).until(() -> appliedCount("down-1") == 1);
    assertQueueEmpty();
    assertThat(appliedCount("down-1")).isOne();
    assertThat(offered)
        .as(
            "deliveries offered (value/delivery count): the record kept acquired through the outage")
        .allSatisfy(offer -> assertThat(offer).endsWith("/1"));
    assertThat(stored("down-1").attempts()).isOne();
  }

  @Test
  void aRecordWhoseSuccessCannotBeWrittenIsAcceptedOnceWrittenAndItsCopyElsewhereIsNotRunAgain()
      throws Exception {
    AtomicInteger runs = new AtomicInteger();
    long[] downSince = new long[1];
    RecordHandler<String, String> handler =
        record -> {
          apply(record);
          if (runs.incrementAndGet() == 1) {
            // The database goes away as the handler returns: its SUCCESS cannot be written.
            downSince[0] = System.nanoTime();
            faulty.proxy().cutAll();
            faulty.proxy().refuse();
          }
        };
    start(handler);
    start(handler);
    await().atMost(WAIT).until(() -> TestShareGroups.members(group) == 2);

    send("mark-1", "original");
    await().atMost(WAIT).alias("the original's handler ran").until(() -> runs.get() == 1);
    send("mark-1", "copy");
    await()
        .atMost(WAIT)
        .alias("the copy tried by the other consumer while the database is down")
        .until(() -> refusals("copy") > 0);
    sleepUntil(downSince[0] + OUTAGE.toNanos());
    assertThat(runs).as("handler runs of mark-1 during the outage").hasValue(1);
    assertThat(offeredTo.get("copy"))
        .as("the copy went to the consumer that does not hold the original")
        .doesNotContainAnyElementsOf(offeredTo.get("original"));
    faulty.proxy().pass();

    await().atMost(WAIT).until(() -> TestShareGroups.lag(group, topic) == 0);
    assertQueueEmpty();
    assertThat(runs).as("handler runs of mark-1").hasValue(1);
    assertThat(offered)
        .as("deliveries offered (value/delivery count)")
        .allSatisfy(offer -> assertThat(offer).endsWith("/1"));
    assertThat(stored("mark-1").status()).isEqualTo(DedupStatus.SUCCESS);
  }

  @Test
  void aLoopClosedWhileItsClaimWaitsForTheDatabaseGivesTheRecordBackOnceUnrecorded()
      throws Exception {
    // A lock long enough to tell a record given back by the stop from one left to its lock, with
    // room for a loaded machine: the refused claim, the close and the next loop's start take 15 s.
    Duration longLock = Duration.ofSeconds(45);
    TestShareGroups.configure(group, longLock, Duration.ofSeconds(1));
    faulty.proxy().refuse();
    DedupShareLoop<String, String> first = start(record -> apply(record));
    send("stop-1", "claimed as the loop stops");
    await()
        .atMost(WAIT)
        .alias("the record's claim refused")
        .until(() -> refusals("claimed as the loop stops") > 0);

    long closing = System.nanoTime();
    first.close();
    Duration closed = Duration.ofNanos(System.nanoTime() - closing);
    assertThat(closed).as("close() within twice the close timeout").isLessThan(closeTimeout(2));
    faulty.proxy().pass();
    assertThat(fixture.store().find(DedupKey.of(LoopFixture.BIZ_TYPE, "stop-1")))
        .as("nothing recorded for the key")
        .isEmpty();

    start(record -> apply(record));
    await().atMost(WAIT).until(() -> appliedCount("stop-1") == 1);
    Duration redelivered =
        Duration.ofNanos(System.nanoTime() - firstOffered.get("claimed as the loop stops"));
    assertQueueEmpty();
    assertThat(appliedCount("stop-1")).isOne();
    assertThat(offered.get(offered.size() - 1))
        .as("the delivery applied: one delivery spent by the stop")
        .isEqualTo("claimed as the loop stops/2");
    assertThat(stored("stop-1").attempts()).isOne();
    assertThat(redelivered)
        .as("applied after its first offer: given back by the stop, not left to its lock")
        .isLessThan(longLock.minusSeconds(15));
  }

  private static Duration closeTimeout(int times) {
    return Duration.ofSeconds(10).multipliedBy(times);
  }

  private DedupShareLoop<String, String> start(RecordHandler<String, String> handler) {
    int number = loops.size();
    // One try per store call: a try already waits past the lock, and retries would only have the
    // test wait out the store's retry budget, once for the poll's claim and once for the record's.
    IdempotentExecutor executor =
        IdempotentExecutor.builder(JdbcDedupStore.builder(faulty).retryMaxAttempts(1).build())
            .build();
    executors.add(executor);
    IdempotentRecordHandler<String, String> records =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType(LoopFixture.BIZ_TYPE)
            .key(KeyExtractors.header(LoopFixture.KEY_HEADER))
            .groupId(group)
            .handler(handler)
            .build();
    RecordProcessor<String, String> processor =
        new RecordProcessor<>() {
          @Override
          public Outcome process(ConsumerRecord<String, String> record) {
            firstOffered.putIfAbsent(record.value(), System.nanoTime());
            offered.add(record.value() + "/" + record.deliveryCount().orElse((short) 0));
            offeredTo
                .computeIfAbsent(record.value(), k -> ConcurrentHashMap.newKeySet())
                .add(number);
            try {
              return records.process(record);
            } catch (RuntimeException e) {
              refused.computeIfAbsent(record.value(), k -> new AtomicInteger()).incrementAndGet();
              throw e;
            }
          }

          @Override
          public OptionalInt attempts(ConsumerRecord<String, String> record) {
            return records.attempts(record);
          }

          @Override
          public void prepare(List<ConsumerRecord<String, String>> polled) {
            records.prepare(polled);
          }

          @Override
          public List<ConsumerRecord<String, String>> settle() {
            return records.settle();
          }
        };
    DedupShareLoop<String, String> loop =
        DedupShareLoop.builder(TestShareGroups.consumerConfig(group), List.of(topic), processor)
            .deadLetterHandler(KafkaDeadLetterPublisher.builder(dltProducer).groupId(group).build())
            .holdBackOff(Duration.ofMillis(500), Duration.ofSeconds(2))
            .closeTimeout(closeTimeout(1))
            .build();
    loops.add(loop);
    threads.execute(loop);
    return loop;
  }

  private void assertQueueEmpty() {
    loops.forEach(DedupShareLoop::close);
    assertThat(TestShareGroups.remaining(group, topic, Duration.ofSeconds(3))).isEmpty();
  }

  private DedupRecord stored(String orderNo) {
    return fixture.store().find(DedupKey.of(LoopFixture.BIZ_TYPE, orderNo)).orElseThrow();
  }

  private void apply(ConsumerRecord<String, String> record) {
    applied
        .computeIfAbsent(LoopFixture.orderNo(record), k -> new AtomicInteger())
        .incrementAndGet();
  }

  private int appliedCount(String orderNo) {
    AtomicInteger count = applied.get(orderNo);
    return count == null ? 0 : count.get();
  }

  private int refusals(String value) {
    AtomicInteger count = refused.get(value);
    return count == null ? 0 : count.get();
  }

  private void send(String orderNo, String value) throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(topic, value);
    record.headers().add(LoopFixture.KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
    fixture.producer().send(record).get();
  }

  private static void sleepUntil(long nanos) throws InterruptedException {
    long left = nanos - System.nanoTime();
    if (left > 0) {
      Thread.sleep(left / 1_000_000L + 1);
    }
  }
}
