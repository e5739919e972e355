package io.consumerdedup.kafka;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupAttemptsExhaustedException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.testing.ChildJvm;
import io.consumerdedup.testing.ReplyLosingStore;
import io.consumerdedup.testing.TestKafka;
import io.consumerdedup.testing.TestShareGroups;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Function;
import java.util.function.Supplier;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.consumer.ShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.IntegerDeserializer;
import org.apache.kafka.common.serialization.IntegerSerializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * {@link DedupShareLoop} against a real broker's share groups (several consumers on one partition,
 * each record acquired under a lock of a few seconds) and a real PostgreSQL: what a user of a Kafka
 * queue would notice of each hazard.
 */
class DedupShareLoopTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("share_loop");

  private static final Duration WAIT = Duration.ofSeconds(60);

  // Written by the thread that restarts loops too.
  private final List<DedupShareLoop<String, String>> loops = new CopyOnWriteArrayList<>();
  private final List<IdempotentExecutor> executors = new CopyOnWriteArrayList<>();

  /** Whether {@link #startRestartingOnError} starts a new loop when the last one ends. */
  private final AtomicBoolean restarting = new AtomicBoolean(true);

  /** The loops {@link #startRestartingOnError} saw end on an Error. */
  private final AtomicInteger loopsEnded = new AtomicInteger();

  private final ExecutorService threads = Executors.newCachedThreadPool();
  private final KafkaProducer<String, String> dltProducer = TestKafka.producer();

  /** Runs after each settle of a poll's records, by any loop: lets a test throw there. */
  private volatile Runnable afterSettle = () -> {};

  /** The offsets whose processing returned (applied, or a duplicate), by any loop. */
  private final Set<Long> completed = ConcurrentHashMap.newKeySet();

  /** This test's topic and share group. */
  private String topic;

  private String group;

  @BeforeEach
  void names() {
    topic = fixture.topic();
    group = fixture.group();
  }

  @AfterEach
  void stop() {
    restarting.set(false);
    loops.forEach(DedupShareLoop::close);
    threads.shutdownNow();
    executors.forEach(IdempotentExecutor::close);
    dltProducer.close();
  }

  @Test
  void threeConsumersOfOnePartitionApplyEachKeyOnceThoughDuplicatesAreMixedIn() throws Exception {
    createQueue(Duration.ofSeconds(5));
    int keys = 60;
    Map<String, AtomicInteger> applied = new ConcurrentHashMap<>();
    Map<String, Set<String>> byConsumer = new ConcurrentHashMap<>();
    for (int c = 0; c < 3; c++) {
      String consumer = "consumer-" + c;
      start(
          Duration.ofMinutes(5),
          record -> {
            applied.computeIfAbsent(orderNo(record), k -> new AtomicInteger()).incrementAndGet();
            byConsumer
                .computeIfAbsent(consumer, k -> ConcurrentHashMap.newKeySet())
                .add(orderNo(record));
            // The members learn of the partition a heartbeat apart: the first to fetch would take
            // every record before the others could (once seen on a loaded machine), and the test
            // would not show consumers sharing it. Its records wait, up to 10 s, for another's.
            long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
            while (byConsumer.size() < 2 && System.nanoTime() - deadline < 0) {
              Thread.sleep(20);
            }
            Thread.sleep(5);
          },
          b -> b);
    }
    // Sent once all three have joined: the first one alone would take them all in a second.
    await().atMost(WAIT).until(() -> TestShareGroups.members(group) == 3);
    for (int copy = 0; copy < 3; copy++) {
      for (int k = 0; k < keys; k++) {
        send("order-" + k, "copy " + copy);
      }
    }
    await().atMost(WAIT).untilAsserted(() -> assertThat(completed).hasSize(3 * keys));
    assertQueueEmpty();
    assertThat(applied.values()).allSatisfy(count -> assertThat(count.get()).isEqualTo(1));
    assertThat(byConsumer).as("the consumers shared the partition").hasSizeGreaterThan(1);
  }

  @Test
  void aHandlerSlowerThanTheLockKeepsItsRecordAndNeverRunsTwiceAtOnce() throws Exception {
    // Renewed every third of it: the lock runs out only if the loop's thread stalls for 1.3 s.
    Duration lock = Duration.ofSeconds(2);
    createQueue(lock);
    send("slow-1", "takes three locks");
    AtomicInteger running = new AtomicInteger();
    AtomicInteger mostAtOnce = new AtomicInteger();
    AtomicInteger runs = new AtomicInteger();
    List<String> deliveries = new CopyOnWriteArrayList<>();
    for (int c = 0; c < 2; c++) {
      String consumer = "consumer-" + c;
      start(
          Duration.ofMinutes(5),
          record -> {
            runs.incrementAndGet();
            mostAtOnce.accumulateAndGet(running.incrementAndGet(), Math::max);
            try {
              Thread.sleep(lock.multipliedBy(3).toMillis());
            } finally {
              running.decrementAndGet();
            }
          },
          b -> b,
          record ->
              deliveries.add(consumer + " delivery " + record.deliveryCount().orElse((short) 0)));
    }
    await().atMost(WAIT).until(() -> runs.get() == 1 && running.get() == 0);
    assertQueueEmpty();
    assertThat(runs.get()).isEqualTo(1);
    assertThat(mostAtOnce.get()).isEqualTo(1);
    assertThat(deliveries)
        .as("its lock was renewed: never handed to the other consumer, never delivered again")
        .hasSize(1)
        .allSatisfy(d -> assertThat(d).endsWith("delivery 1"));
  }

  /**
   * A record sent while the consumer renews the lock of a long handler's record: renewals sent with
   * a poll fetch it, and the consumer keeps it in its buffer, out of the loop's reach, until the
   * handler's record is acknowledged; there its lock ran out again and again, each time a delivery,
   * until the broker archived it unapplied.
   */
  @Test
  void aRecordSentWhileALongHandlerRunsIsNotFetchedToExpireUnseen() throws Exception {
    Duration lock = Duration.ofSeconds(2);
    createQueue(lock);
    CountDownLatch slowStarted = new CountDownLatch(1);
    Map<String, AtomicInteger> applied = new ConcurrentHashMap<>();
    List<String> deliveries = new CopyOnWriteArrayList<>();
    start(
        Duration.ofMinutes(5),
        record -> {
          applied.computeIfAbsent(orderNo(record), k -> new AtomicInteger()).incrementAndGet();
          if (orderNo(record).equals("long-1")) {
            slowStarted.countDown();
            Thread.sleep(lock.multipliedBy(5).toMillis());
          }
        },
        b -> b,
        record ->
            deliveries.add(
                orderNo(record) + " delivery " + record.deliveryCount().orElse((short) 0)));
    // Sent once the consumer has joined, so that it is delivered whatever the group's start.
    await().atMost(WAIT).until(() -> TestShareGroups.members(group) == 1);
    send("long-1", "takes five locks");
    assertThat(slowStarted.await(WAIT.toSeconds(), TimeUnit.SECONDS)).isTrue();
    send("queued-1", "sent while long-1 runs");
    await()
        .alias("queued-1 applied (not archived after its deliveries ran out in a buffer)")
        .atMost(WAIT)
        .until(() -> applied.containsKey("queued-1"));
    assertQueueEmpty();
    assertThat(applied)
        .as("each key applied once, none archived unapplied")
        .containsOnlyKeys("long-1", "queued-1");
    assertThat(applied.values()).allSatisfy(count -> assertThat(count.get()).isEqualTo(1));
    assertThat(deliveries)
        .as(
            "queued-1 fetched once long-1 was acknowledged: no delivery spent in the consumer's buffer")
        .containsExactly("long-1 delivery 1", "queued-1 delivery 1");
  }

  /**
   * A handler that restores its thread's interrupt flag (the usual answer to an {@code
   * InterruptedException} it caught) and fails: the worker thread must not take the flag for a stop
   * request and end, or the loop renews the records handed to it for good and fetches nothing.
   */
  @Test
  void aHandlerThatLeavesItsThreadInterruptedDoesNotStopTheConsumer() throws Exception {
    createQueue(Duration.ofSeconds(5));
    AtomicBoolean interrupted = new AtomicBoolean();
    Map<String, AtomicInteger> applied = new ConcurrentHashMap<>();
    start(
        Duration.ofMinutes(5),
        record -> {
          if (orderNo(record).equals("interrupted-1") && interrupted.compareAndSet(false, true)) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("the payment client was interrupted");
          }
          applied.computeIfAbsent(orderNo(record), k -> new AtomicInteger()).incrementAndGet();
        },
        b -> b.retryBackOff(Duration.ofMillis(100)));
    await().atMost(WAIT).until(() -> TestShareGroups.members(group) == 1);
    send("interrupted-1", "fails once, its thread interrupted");
    await().atMost(WAIT).until(interrupted::get);
    send("after-1", "sent afterwards");
    await()
        .alias("both records applied after the interrupted attempt")
        .atMost(WAIT)
        .until(() -> applied.containsKey("interrupted-1") && applied.containsKey("after-1"));
    assertQueueEmpty();
    assertThat(applied.values()).allSatisfy(count -> assertThat(count.get()).isEqualTo(1));
  }

  @Test
  void aFailingHandlerIsReleasedThenDeadLetteredAndRejectedAfterItsAttempts() throws Exception {
    createQueue(Duration.ofSeconds(5));
    send("bad-1", "always fails");
    AtomicInteger runs = new AtomicInteger();
    start(
        Duration.ofMinutes(5),
        record -> {
          runs.incrementAndGet();
          throw new IllegalStateException("payment provider says no");
        },
        b -> b.maxAttempts(3).retryBackOff(Duration.ofMillis(100)));
    List<ConsumerRecord<String, String>> dead = TestKafka.readFromStart(topic + "-dlt", 1, WAIT);
    assertThat(dead).hasSize(1);
    assertThat(LoopFixture.orderNo(dead.get(0))).isEqualTo("bad-1");
    assertQueueEmpty();
    assertThat(runs.get()).as("attempts, then rejected: never delivered again").isEqualTo(3);
    assertThat(TestKafka.readWritten(topic + "-dlt")).hasSize(1);
  }

  /**
   * An application's processor (a decorator of the handler written in Kotlin, or with Lombok's
   * {@code @SneakyThrows}) throws a checked exception its signature does not declare, once. The
   * worker caught only runtime exceptions and Errors: its thread ended without an Error, and the
   * loop went on renewing the poll's locks, deciding nothing and fetching nothing. It is a handler
   * failure like any other: released, applied on the next delivery, and the next record applied.
   */
  @Test
  void aProcessorThrowingAnUndeclaredCheckedExceptionHasItsRecordRetriedAndTheNextApplied()
      throws Exception {
    createQueue(Duration.ofSeconds(5));
    send("sneaky-1", "charge sneaky-1");
    send("after-sneaky-1", "charge after-sneaky-1");
    AtomicInteger thrown = new AtomicInteger();
    Map<String, AtomicInteger> applied = new ConcurrentHashMap<>();
    start(
        Duration.ofMinutes(5),
        record ->
            applied.computeIfAbsent(orderNo(record), k -> new AtomicInteger()).incrementAndGet(),
        b -> b.retryBackOff(Duration.ofMillis(100)),
        record -> {
          if (orderNo(record).equals("sneaky-1") && thrown.getAndIncrement() == 0) {
            throw DedupShareLoopTest.<RuntimeException>undeclared(
                new java.io.IOException("the audit log's disk is full"));
          }
        },
        KafkaShareConsumer::new);

    await()
        .atMost(Duration.ofSeconds(20))
        // What a user sees: records that are never applied, not a thread's stack trace.
        .dontCatchUncaughtExceptions()
        .untilAsserted(
            () ->
                assertThat(applied.keySet())
                    .as("records applied after the undeclared exception (%s thrown)", thrown)
                    .containsExactlyInAnyOrder("sneaky-1", "after-sneaky-1"));
    assertThat(thrown).as("the processor's undeclared exception thrown").hasValueGreaterThan(0);
    assertQueueEmpty();
    assertThat(applied.get("sneaky-1")).hasValue(1);
    assertThat(applied.get("after-sneaky-1")).hasValue(1);
  }

  /** Throws {@code checked} where the compiler takes it for a {@code T}. */
  @SuppressWarnings("unchecked")
  private static <T extends Throwable> T undeclared(Throwable checked) throws T {
    throw (T) checked;
  }

  @Test
  void aRecordWhoseAttemptsAreSpentIsNotRunAgainAfterARestartThatCameBeforeItsDeadLetter()
      throws Exception {
    createQueue(Duration.ofSeconds(5));
    send("spent-1", "always fails");
    AtomicInteger runs = new AtomicInteger();
    RecordHandler<String, String> alwaysFails =
        record -> {
          runs.incrementAndGet();
          throw new IllegalStateException("payment provider says no");
        };
    // The dead-letter topic is down until the loop is restarted.
    AtomicBoolean topicDown = new AtomicBoolean(true);
    AtomicInteger deadLetterTries = new AtomicInteger();
    DeadLetterHandler<String, String> publisher =
        KafkaDeadLetterPublisher.<String, String>builder(dltProducer).groupId(group).build();
    Customizer downUntilRestart =
        b ->
            b.maxAttempts(3)
                .retryBackOff(Duration.ofMillis(100))
                .deadLetterHandler(
                    (record, reason) -> {
                      deadLetterTries.incrementAndGet();
                      if (topicDown.get()) {
                        throw new IllegalStateException("dead-letter topic unavailable");
                      }
                      publisher.deadLetter(record, reason);
                    });
    start(Duration.ofMinutes(5), alwaysFails, downUntilRestart);
    await().atMost(WAIT).until(() -> deadLetterTries.get() >= 2);
    loops.get(0).close();
    assertThat(runs).as("handler runs before the restart").hasValue(3);

    topicDown.set(false);
    start(Duration.ofMinutes(5), alwaysFails, downUntilRestart);
    List<ConsumerRecord<String, String>> dead = TestKafka.readFromStart(topic + "-dlt", 1, WAIT);
    assertThat(dead).hasSize(1);
    assertThat(runs).as("handler runs in all").hasValue(3);
    assertThat(LoopFixture.header(dead.get(0), KafkaDeadLetterPublisher.EXCEPTION_CLASS_HEADER))
        .isEqualTo(DedupAttemptsExhaustedException.class.getName());
    assertQueueEmpty();
    assertThat(TestKafka.readWritten(topic + "-dlt")).hasSize(1);
  }

  @Test
  void aRecordWithoutItsKeyIsDeadLetteredAndRejectedAtOnce() throws Exception {
    createQueue(Duration.ofSeconds(5));
    fixture.producer().send(new ProducerRecord<>(topic, "no header")).get();
    send("ok-1", "fine");
    AtomicInteger runs = new AtomicInteger();
    start(Duration.ofMinutes(5), record -> runs.incrementAndGet(), b -> b);
    List<ConsumerRecord<String, String>> dead = TestKafka.readFromStart(topic + "-dlt", 1, WAIT);
    assertThat(dead).hasSize(1);
    assertThat(dead.get(0).value()).isEqualTo("no header");
    await().atMost(WAIT).until(() -> runs.get() == 1);
    assertQueueEmpty();
    assertThat(runs.get()).as("only the record with a key ran").isEqualTo(1);
  }

  @Test
  void aValueTheDeserializerRejectsIsDeadLetteredWithItsRawBytesThenRejected() throws Exception {
    createQueue(Duration.ofSeconds(5));
    try (KafkaProducer<byte[], byte[]> raw = TestKafka.rawProducer();
        IntegerSerializer integers = new IntegerSerializer()) {
      raw.send(new ProducerRecord<>(topic, integers.serialize(topic, 100))).get();
      raw.send(new ProducerRecord<>(topic, new byte[] {1, 2, 3})).get(); // not an int
      raw.send(new ProducerRecord<>(topic, integers.serialize(topic, 200))).get();
      Map<String, Object> config = TestShareGroups.consumerConfig(group);
      config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, IntegerDeserializer.class);
      List<Integer> handled = new CopyOnWriteArrayList<>();
      KafkaProducer<String, Integer> typed =
          TestKafka.producer(new StringSerializer(), new IntegerSerializer());
      try (typed) {
        DedupShareLoop<String, Integer> loop =
            DedupShareLoop.<String, Integer>builder(
                    config,
                    List.of(topic),
                    record -> {
                      handled.add(record.value());
                      return Outcome.PROCESSED;
                    })
                .deadLetterHandler(
                    KafkaDeadLetterPublisher.builder(typed).rawProducer(raw).groupId(group).build())
                .build();
        threads.execute(loop);
        try {
          List<ConsumerRecord<byte[], byte[]>> dead =
              TestKafka.readRawFromStart(topic + "-dlt", 1, WAIT);
          assertThat(dead).hasSize(1);
          assertThat(dead.get(0).value()).containsExactly(1, 2, 3);
          await().atMost(WAIT).untilAsserted(() -> assertThat(handled).contains(100, 200));
        } finally {
          loop.close();
        }
      }
    }
    assertThat(TestShareGroups.remaining(group, topic, Duration.ofSeconds(3))).isEmpty();
  }

  /**
   * A consumer killed in its handler: its record's lock runs out and another consumer acquires it,
   * meets the dead holder's live lease, and waits, keeping the record acquired, until the lease
   * runs out, then applies it. Waiting must not use up the record's deliveries: with a lease five
   * times the lock, releasing it at each wait would use the default limit of 5 in seconds and have
   * the broker archive it unapplied.
   */
  @Test
  void aConsumerKilledInItsHandlerLeavesItsRecordToAnotherThatAppliesItOnce() throws Exception {
    Duration lock = Duration.ofSeconds(2);
    Duration lease = Duration.ofSeconds(10);
    createQueue(lock);
    send("crash-1", "the handler of the first consumer dies in it");
    try (ChildJvm child =
        ChildJvm.start(
            ShareCrashWorker.class,
            TestKafka.bootstrapServers(),
            fixture.schema(),
            topic,
            group,
            String.valueOf(lease.toMillis()))) {
      child.awaitLine("IN HANDLER crash-1", WAIT);
      child.kill();
    }
    List<Short> deliveries = new CopyOnWriteArrayList<>();
    AtomicInteger runs = new AtomicInteger();
    long killed = System.nanoTime();
    start(
        lease,
        record -> {
          runs.incrementAndGet();
          deliveries.add(record.deliveryCount().orElse((short) -1));
        },
        b -> b.holdBackOff(Duration.ofMillis(500), Duration.ofSeconds(2)));
    await().atMost(WAIT).until(() -> runs.get() == 1);
    assertQueueEmpty();
    assertThat(runs.get()).as("applied once, after the dead holder's lease").isEqualTo(1);
    assertThat(Duration.ofNanos(System.nanoTime() - killed)).isGreaterThan(lease.minusSeconds(4));
    assertThat(deliveries)
        .as("the second delivery, kept through the wait rather than released")
        .containsExactly((short) 2);
  }

  /**
   * The loop's thread stalls past the lock (a GC pause) while a failing handler runs on delivery 4:
   * the lock runs out and the broker delivers the record again, to the same consumer, as delivery
   * 5, the last of the broker's default limit. Taken for the renewed delivery 4 coming back, it got
   * the RELEASE decided for delivery 4, and the broker archived it: no dead letter, no further run.
   */
  @Test
  void aRecordWhoseLockRanOutDuringAStallIsDeadLetteredOnItsLastDeliveryNotArchived()
      throws Exception {
    Duration lock = Duration.ofSeconds(1);
    createQueue(lock);
    send("stalled-1", "fails on every delivery");
    releaseThreeTimes();
    List<Short> deliveries = new CopyOnWriteArrayList<>();
    AtomicInteger runs = new AtomicInteger();
    List<StallingShareConsumer<String, String>> consumers = new CopyOnWriteArrayList<>();
    start(
        Duration.ofMinutes(5),
        record -> {
          runs.incrementAndGet();
          // Delivery 5 takes longer than the retry back-off too: a RELEASE decided for delivery 4
          // would be due before delivery 5's own decision.
          boolean fourth = record.deliveryCount().orElse((short) 0) == 4;
          Thread.sleep(fourth ? lock.multipliedBy(5).toMillis() : 500);
          throw new IllegalStateException("payment provider says no");
        },
        b -> b.retryBackOff(Duration.ofMillis(100)),
        record -> deliveries.add(record.deliveryCount().orElse((short) -1)),
        config -> {
          StallingShareConsumer<String, String> consumer =
              new StallingShareConsumer<>(config, lock.multipliedBy(3));
          consumers.add(consumer);
          return consumer;
        });
    List<ConsumerRecord<String, String>> dead =
        TestKafka.readFromStart(topic + "-dlt", 1, Duration.ofSeconds(30));
    assertThat(consumers.get(0).stalled()).as("the loop's thread stalled past the lock").isTrue();
    assertThat(dead).as("dead-lettered on its last delivery, not archived unseen").hasSize(1);
    assertThat(LoopFixture.orderNo(dead.get(0))).isEqualTo("stalled-1");
    assertQueueEmpty();
    assertThat(deliveries)
        .as("delivery 5, after the lock ran out, was handled as a delivery of its own")
        .containsExactly((short) 4, (short) 5);
    assertThat(runs.get()).isEqualTo(2);
    assertThat(consumers.get(0).acknowledged())
        .as("delivery 5 got its own decision, not the RELEASE decided for delivery 4")
        .containsExactly("0/5 REJECT");
  }

  /**
   * The dead letter of a record without its key cannot be written at first, so the loop keeps the
   * record acquired and tries the dead letter again after the hold back-off; meanwhile the loop's
   * thread stalls past the lock (a GC pause), and the broker delivers the record again, to the same
   * consumer. The new delivery is dead-lettered and rejected; the earlier delivery's retry, still
   * queued in the worker, wrote a second dead letter of the same record once the topic took it.
   */
  @Test
  void aDeadLetterRetriedForADeliveryWhoseLockWasLostIsNotWrittenTwice() throws Exception {
    Duration lock = Duration.ofSeconds(1);
    createQueue(lock);
    fixture.producer().send(new ProducerRecord<>(topic, "no header")).get();
    List<Short> deliveries = new CopyOnWriteArrayList<>();
    List<StallingShareConsumer<String, String>> consumers = new CopyOnWriteArrayList<>();
    DeadLetterHandler<String, String> publisher =
        KafkaDeadLetterPublisher.<String, String>builder(dltProducer).groupId(group).build();
    start(
        Duration.ofMinutes(5),
        record -> {
          throw new AssertionError("a record without its key is never handled");
        },
        b ->
            b.deadLetterHandler(
                (record, reason) -> {
                  // The dead-letter topic is out of reach until the record's second delivery.
                  if (!deliveries.contains((short) 2)) {
                    throw new IllegalStateException("dead-letter topic unreachable");
                  }
                  publisher.deadLetter(record, reason);
                }),
        record -> deliveries.add(record.deliveryCount().orElse((short) -1)),
        config -> {
          StallingShareConsumer<String, String> consumer =
              new StallingShareConsumer<>(config, lock.multipliedBy(3));
          consumers.add(consumer);
          return consumer;
        });
    List<ConsumerRecord<String, String>> dead =
        TestKafka.readFromStart(topic + "-dlt", 1, Duration.ofSeconds(30));
    assertThat(dead).hasSize(1);
    assertThat(consumers.get(0).stalled()).as("the loop's thread stalled past the lock").isTrue();
    assertThat(deliveries).containsExactly((short) 1, (short) 2);
    assertThat(TestKafka.readFromStart(topic + "-dlt", 2, Duration.ofSeconds(4)))
        .as("one dead letter of the record, not one more for the delivery whose lock was lost")
        .hasSize(1);
    assertQueueEmpty();
  }

  /**
   * Three records whose handler throws a StackOverflowError, then a healthy one, all in one poll;
   * the application starts a new loop each time one ends on the Error. Each end left the poll's
   * records after the failing one undecided, and the consumer's close gave them back to the broker,
   * which counts the delivery (Kafka 4.2 counts every acquisition, released or not): the healthy
   * record was applied only once the poisoned ones were dead-lettered, on its fourth or fifth
   * delivery, and on its fifth the broker archives it instead, unapplied and without a dead letter.
   */
  @Test
  void aRecordPolledWithOthersWhoseHandlerThrowsAnErrorIsAppliedOnItsFirstDelivery()
      throws Exception {
    createQueue(Duration.ofSeconds(5));
    // In one batch, as a busy producer sends them: the broker acquires them together.
    List<Future<?>> sent = new ArrayList<>();
    for (String orderNo : List.of("poison-1", "poison-2", "poison-3", "healthy-1")) {
      ProducerRecord<String, String> record =
          new ProducerRecord<>(topic, orderNo.startsWith("poison") ? "overflows" : "fine");
      record.headers().add(LoopFixture.KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
      sent.add(fixture.producer().send(record));
    }
    fixture.producer().flush();
    for (Future<?> each : sent) {
      each.get();
    }
    Map<String, AtomicInteger> applied = new ConcurrentHashMap<>();
    List<String> runs = new CopyOnWriteArrayList<>();
    startRestartingOnError(
        record -> {
          runs.add(orderNo(record) + "/" + record.deliveryCount().orElse((short) 0));
          if (record.value().equals("overflows")) {
            throw new StackOverflowError("recursion in " + orderNo(record));
          }
          applied.computeIfAbsent(orderNo(record), k -> new AtomicInteger()).incrementAndGet();
        },
        b -> b.retryBackOff(Duration.ofMillis(100)));
    List<ConsumerRecord<String, String>> dead = TestKafka.readFromStart(topic + "-dlt", 3, WAIT);
    assertThat(dead)
        .as("each poisoned record dead-lettered, none archived unseen: " + runs)
        .extracting(LoopFixture::orderNo)
        .containsExactlyInAnyOrder("poison-1", "poison-2", "poison-3");
    await().atMost(WAIT).until(() -> applied.containsKey("healthy-1"));
    assertThat(runs)
        .filteredOn(run -> run.startsWith("healthy-1/"))
        .as("applied on its first delivery: no loop ended on the Error with it undecided")
        .containsExactly("healthy-1/1");
    restarting.set(false);
    assertQueueEmpty();
    assertThat(applied.get("healthy-1").get()).isEqualTo(1);
  }

  /**
   * A record's second delivery meets an {@code Error} as its key is claimed (an {@code
   * OutOfMemoryError} while the answer of a claim the database committed is read), before its
   * handler runs; the application starts a new loop each time one ends on an Error. The worker
   * counted it as a failed attempt of the handler: the record, two attempts allowed, was
   * dead-lettered and rejected as "Handler threw OutOfMemoryError" having run once, its retry never
   * run. It is no attempt, and the loop goes on: the record, kept acquired, is claimed again and
   * applied once (ending the loop on it spent a delivery each time, see {@link
   * #aRecordWhoseClaimMeetsAnErrorAgainAndAgainIsAppliedNotArchived}).
   */
  @Test
  void anErrorAsARetryIsClaimedIsNoAttemptOfTheHandlerAndTheRecordIsClaimedAgain()
      throws Exception {
    createQueue(Duration.ofSeconds(5));
    send("retry-1", "fails once");
    ReplyLosingStore losing = ReplyLosingStore.in(fixture.store());
    AtomicInteger runs = new AtomicInteger();
    AtomicInteger applied = new AtomicInteger();
    RecordHandler<String, String> failsFirst =
        record -> {
          if (runs.incrementAndGet() == 1) {
            // The retry's claim meets the Error once the database has committed it.
            losing.loseNextClaimReplyTo(
                new OutOfMemoryError("Java heap space, reading the claim's answer"));
            throw new IllegalStateException("card network timeout");
          }
          applied.incrementAndGet();
        };
    startRestartingOnError(
        losing, false, failsFirst, b -> b.maxAttempts(2).retryBackOff(Duration.ofMillis(100)));
    await()
        .atMost(WAIT)
        .until(
            () ->
                applied.get() > 0
                    || !TestKafka.readFromStart(topic + "-dlt", 1, Duration.ofMillis(200))
                        .isEmpty());
    assertThat(losing.repliesLost()).as("claims answered with the Error").isEqualTo(1);
    assertThat(loopsEnded).as("loops ended on the Error").hasValue(0);
    assertThat(TestKafka.readFromStart(topic + "-dlt", 1, Duration.ofSeconds(2)))
        .as("records dead-lettered after %s handler run(s) of the two allowed", runs)
        .isEmpty();
    assertThat(runs).as("handler runs").hasValue(2);
    assertThat(applied).hasValue(1);
    restarting.set(false);
    assertQueueEmpty();
  }

  /**
   * A record's claim meets an {@code Error} once the database has committed it (an {@code
   * OutOfMemoryError} as its answer is read), five times in a row, each before the handler ran; the
   * application starts a new loop each time one ends on an Error. The record is kept acquired and
   * claimed again after the hold back-off: one loop, one delivery, applied once. Each end left the
   * record undecided and the consumer's close gave it back, a delivery counted each time: on its
   * fifth the broker archived it, unapplied and without a dead letter, its handler never run.
   */
  @Test
  void aRecordWhoseClaimMeetsAnErrorAgainAndAgainIsAppliedNotArchived() throws Exception {
    List<String> runs = runsOfARecordWhoseClaimMeetsAnErrorAgainAndAgain("claimed-alone-1", false);
    assertThat(runs).as("handler runs, on its first delivery").containsExactly("claimed-alone-1/1");
    assertThat(loopsEnded).as("loops ended on the Error").hasValue(0);
    assertThat(TestKafka.readFromStart(topic + "-dlt", 1, Duration.ofSeconds(1)))
        .as("records dead-lettered")
        .isEmpty();
    restarting.set(false);
    assertQueueEmpty();
  }

  /**
   * The batch claim of a poll meets an {@code Error} once the database has committed it (an {@code
   * OutOfMemoryError} as its answer is read), five times in a row; the application starts a new
   * loop each time one ends on an Error. The records are kept acquired and claimed again: one loop,
   * one delivery. Each end left the poll undecided, and the consumer's close gave its record back,
   * a delivery counted each time: on its fifth the broker archived it, unapplied and without a dead
   * letter, though its handler never ran.
   */
  @Test
  void aRecordWhoseBatchClaimMeetsAnErrorAgainAndAgainIsAppliedNotArchived() throws Exception {
    List<String> runs = runsOfARecordWhoseClaimMeetsAnErrorAgainAndAgain("claimed-1", true);
    assertThat(runs).as("handler runs, on its first delivery").containsExactly("claimed-1/1");
    assertThat(loopsEnded).as("loops ended on the Error").hasValue(0);
    restarting.set(false);
    assertQueueEmpty();
  }

  /**
   * A record without its key, then a healthy one, in one poll; the dead-letter handler throws an
   * Error (an OutOfMemoryError as it copies a large record) on its first five tries, then writes;
   * the application starts a new loop each time one ends on an Error. The Error ended the loop with
   * the record undecided, and the consumer's close gave it back, a delivery counted each time: on
   * its fifth the broker archived it, without a dead letter and with nothing left in the queue.
   */
  @Test
  void aRecordWhoseDeadLetterThrowsAnErrorIsKeptAndDeadLetteredNotArchivedByTheBroker()
      throws Exception {
    createQueue(Duration.ofSeconds(5));
    // In one batch, as a busy producer sends them: the broker acquires them together.
    List<Future<?>> sent = new ArrayList<>();
    sent.add(fixture.producer().send(new ProducerRecord<>(topic, "charge without its order")));
    ProducerRecord<String, String> healthy = new ProducerRecord<>(topic, "fine");
    healthy
        .headers()
        .add(LoopFixture.KEY_HEADER, "after-keyless-1".getBytes(StandardCharsets.UTF_8));
    sent.add(fixture.producer().send(healthy));
    fixture.producer().flush();
    for (Future<?> each : sent) {
      each.get();
    }
    List<String> runs = new CopyOnWriteArrayList<>();
    List<Short> deadLetterTries = new CopyOnWriteArrayList<>();
    KafkaDeadLetterPublisher<String, String> publisher =
        KafkaDeadLetterPublisher.builder(dltProducer).groupId(group).build();
    startRestartingOnError(
        record -> runs.add(orderNo(record) + "/" + record.deliveryCount().orElse((short) 0)),
        b ->
            b.deadLetterHandler(
                (record, reason) -> {
                  deadLetterTries.add(record.deliveryCount().orElse((short) 0));
                  if (deadLetterTries.size() <= 5) {
                    throw new OutOfMemoryError("Java heap space, copying " + record.offset());
                  }
                  publisher.deadLetter(record, reason);
                }));

    List<ConsumerRecord<String, String>> dead =
        TestKafka.readFromStart(topic + "-dlt", 1, Duration.ofSeconds(30));
    assertThat(dead)
        .as("dead letters of the record without its key (tries, by delivery: %s)", deadLetterTries)
        .hasSize(1);
    assertThat(deadLetterTries)
        .as("the five Errors, then the dead letter written, all on its first delivery")
        .containsExactly((short) 1, (short) 1, (short) 1, (short) 1, (short) 1, (short) 1);
    assertThat(runs)
        .as("the poll's healthy record, applied once")
        .containsExactly("after-keyless-1/1");
    restarting.set(false);
    assertQueueEmpty();
  }

  /**
   * A copy of a key fetched in the same poll as its original: the original applied, the copy
   * accepted as a duplicate on its first delivery (not held or released), the handler run once.
   */
  @Test
  void aCopyPolledTogetherWithItsOriginalIsAcceptedAsADuplicate() throws Exception {
    createQueue(Duration.ofSeconds(5));
    List<Future<?>> sent = new ArrayList<>();
    for (String value : List.of("original", "copy")) {
      ProducerRecord<String, String> record = new ProducerRecord<>(topic, value);
      record.headers().add(LoopFixture.KEY_HEADER, "twin-1".getBytes(StandardCharsets.UTF_8));
      sent.add(fixture.producer().send(record));
    }
    fixture.producer().flush();
    for (Future<?> each : sent) {
      each.get();
    }
    List<String> offered = new CopyOnWriteArrayList<>();
    List<String> runs = new CopyOnWriteArrayList<>();
    start(
        Duration.ofMinutes(5),
        record -> runs.add(record.value()),
        b -> b,
        record -> offered.add(record.value() + "/" + record.deliveryCount().orElse((short) 0)));
    await().atMost(WAIT).until(() -> completed.size() == 2);
    assertQueueEmpty();
    assertThat(offered).as("each offered once").containsExactly("original/1", "copy/1");
    assertThat(runs).containsExactly("original");
  }

  /**
   * A handler throws an AssertionError on one record of a poll, and the poll's settling throws an
   * OutOfMemoryError after it. The settle's Error came out of the worker in the handler's place:
   * the loop ended on the OutOfMemoryError, the handler's lost, and the healthy record of the poll
   * had no decision. Now the handler's Error ends the loop, the other one suppressed in it; the
   * failed record is released and applied once by the next loop, and the healthy one, its SUCCESS
   * written, found a duplicate and accepted: each handler run once, nothing left in the queue.
   */
  @Test
  void anErrorAsAPollSettlesDoesNotHideTheHandlersErrorNorLeaveItsRecordsUndecided()
      throws Exception {
    createQueue(Duration.ofSeconds(5));
    List<Future<?>> sent = new ArrayList<>();
    for (String orderNo : List.of("asserts-1", "settled-1")) {
      ProducerRecord<String, String> record = new ProducerRecord<>(topic, orderNo);
      record.headers().add(LoopFixture.KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
      sent.add(fixture.producer().send(record));
    }
    fixture.producer().flush();
    for (Future<?> each : sent) {
      each.get();
    }
    AtomicBoolean settleFails = new AtomicBoolean(true);
    afterSettle =
        () -> {
          if (settleFails.getAndSet(false)) {
            throw new OutOfMemoryError("settling the poll");
          }
        };
    AtomicBoolean asserts = new AtomicBoolean(true);
    Map<String, AtomicInteger> applied = new ConcurrentHashMap<>();
    List<String> runs = new CopyOnWriteArrayList<>();
    RecordHandler<String, String> handler =
        record -> {
          runs.add(orderNo(record) + "/" + record.deliveryCount().orElse((short) 0));
          if (record.value().startsWith("asserts") && asserts.getAndSet(false)) {
            throw new AssertionError("handler of " + orderNo(record));
          }
          applied.computeIfAbsent(orderNo(record), k -> new AtomicInteger()).incrementAndGet();
        };
    Future<?> first =
        threads.submit(
            loop(
                Duration.ofMinutes(5),
                handler,
                b -> b.retryBackOff(Duration.ofMillis(100)),
                record -> {},
                KafkaShareConsumer::new));

    assertThatThrownBy(() -> first.get(WAIT.toSeconds(), TimeUnit.SECONDS))
        .as("the loop ends on the handler's Error, the settle's suppressed in it: " + runs)
        .cause()
        .isInstanceOf(AssertionError.class)
        .hasMessage("handler of asserts-1")
        .satisfies(
            e ->
                assertThat(e.getSuppressed()).singleElement().isInstanceOf(OutOfMemoryError.class));
    assertThat(runs).as("one poll").containsExactly("asserts-1/1", "settled-1/1");

    start(Duration.ofMinutes(5), handler, b -> b);
    await().atMost(WAIT).until(() -> applied.size() == 2);
    assertQueueEmpty();
    assertThat(runs)
        .as("the failed record run again and applied, the settled one never run twice")
        .filteredOn(run -> run.startsWith("settled-1/"))
        .containsExactly("settled-1/1");
    assertThat(applied.get("asserts-1").get()).isEqualTo(1);
    assertThat(applied.get("settled-1").get()).isEqualTo(1);
  }

  /**
   * The application interrupts the loop's thread to stop it (an executor's {@code shutdownNow})
   * while a handled record's SUCCESS mark is in flight, the database holding it back. The record
   * must not be accepted before its SUCCESS is durable, or a crash then would lose it: the loop
   * stops without acknowledging it, the close gives it back, and once the mark is written a new
   * consumer finds it a duplicate. The handler runs once.
   */
  @Test
  void aLoopInterruptedWhileASuccessMarkIsInFlightDoesNotAcceptTheRecordBeforeItIsDurable()
      throws Exception {
    createQueue(Duration.ofSeconds(5));
    AtomicInteger runs = new AtomicInteger();
    AtomicReference<Connection> blocker = new AtomicReference<>();
    RecordHandler<String, String> handler =
        record -> {
          if (runs.incrementAndGet() == 1) {
            // Taken after the claim committed: the SUCCESS mark's UPDATE waits for it.
            Connection connection = fixture.dataSource().getConnection();
            connection.setAutoCommit(false);
            try (Statement lock = connection.createStatement()) {
              lock.execute("LOCK TABLE consumer_dedup IN SHARE MODE");
            }
            blocker.set(connection);
          }
        };
    // The stopping loop waits this long for the mark before it gives up and closes without
    // acknowledging: the mark is held back until the loop has ended, however long it waits.
    Customizer shortCloseTimeout = b -> b.closeTimeout(Duration.ofSeconds(3));
    Thread loopThread =
        new Thread(
            loop(
                Duration.ofMinutes(5),
                handler,
                shortCloseTimeout,
                r -> {},
                KafkaShareConsumer::new));
    loopThread.start();
    await().atMost(WAIT).until(() -> TestShareGroups.members(group) == 1);
    send("int-1", "charge 7.00");
    await().atMost(WAIT).until(() -> blocker.get() != null);
    await()
        .atMost(WAIT)
        .alias("the SUCCESS mark waits for the lock")
        .until(() -> waitingForLocks() > 0);

    loopThread.interrupt();
    loopThread.join(WAIT.toMillis());
    assertThat(loopThread.isAlive()).as("the interrupted loop ended").isFalse();
    assertThat(
            fixture.store().find(DedupKey.of(LoopFixture.BIZ_TYPE, "int-1")).orElseThrow().status())
        .as("SUCCESS not durable yet")
        .isEqualTo(DedupStatus.PROCESSING);
    assertThat(TestShareGroups.lag(group, topic))
        .as("the record not accepted (-1: nothing acknowledged yet in the group)")
        .isNotZero();

    blocker.get().rollback();
    blocker.get().close();
    await()
        .atMost(WAIT)
        .until(
            () ->
                fixture
                        .store()
                        .find(DedupKey.of(LoopFixture.BIZ_TYPE, "int-1"))
                        .orElseThrow()
                        .status()
                    == DedupStatus.SUCCESS);
    start(Duration.ofMinutes(5), handler, b -> b);
    await().atMost(WAIT).until(() -> TestShareGroups.lag(group, topic) == 0);
    assertQueueEmpty();
    assertThat(runs).as("handler runs").hasValue(1);
  }

  /** Statements of this database waiting for a lock. */
  private static long waitingForLocks() throws SQLException {
    try (Connection connection = fixture.dataSource().getConnection();
        Statement query = connection.createStatement();
        ResultSet waiting = query.executeQuery("SELECT count(*) FROM pg_locks WHERE NOT granted")) {
      waiting.next();
      return waiting.getLong(1);
    }
  }

  /**
   * A handler that closes its own loop (an application that stops consuming on a command record):
   * the close runs on the loop's worker thread, which the loop waits for before its last
   * acknowledgements. Waiting there for the loop to end had the close outlast the loop's close
   * timeout, and the consumer close give the record back unacknowledged although its handler ran.
   */
  @Test
  void aHandlerThatClosesItsOwnLoopHasItsRecordAcceptedBeforeTheLoopEnds() throws Exception {
    createQueue(Duration.ofSeconds(5));
    AtomicReference<DedupShareLoop<String, String>> own = new AtomicReference<>();
    Map<String, AtomicInteger> applied = new ConcurrentHashMap<>();
    DedupShareLoop<String, String> loop =
        loop(
            Duration.ofMinutes(5),
            record -> {
              own.get().close();
              applied.computeIfAbsent(orderNo(record), k -> new AtomicInteger()).incrementAndGet();
            },
            b -> b.closeTimeout(Duration.ofSeconds(3)),
            record -> {},
            KafkaShareConsumer::new);
    own.set(loop);
    Future<?> run = threads.submit(loop);
    await().atMost(WAIT).until(() -> TestShareGroups.members(group) == 1);
    send("shutdown-1", "stop consuming");
    run.get(WAIT.toSeconds(), TimeUnit.SECONDS);
    assertThat(applied).containsOnlyKeys("shutdown-1");
    assertThat(TestShareGroups.remaining(group, topic, Duration.ofSeconds(3)))
        .as("the record whose handler ran was accepted, not given back by the consumer's close")
        .isEmpty();
  }

  /** Has a plain consumer of the group take the queue's record and release it three times. */
  private void releaseThreeTimes() {
    Map<String, Object> config =
        ShareConsumerConfig.explicitAcknowledgement(TestShareGroups.consumerConfig(group));
    try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(config)) {
      consumer.subscribe(List.of(topic));
      int released = 0;
      long deadline = System.nanoTime() + WAIT.toNanos();
      while (released < 3 && System.nanoTime() - deadline < 0) {
        for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
          consumer.acknowledge(record, AcknowledgeType.RELEASE);
          released++;
        }
        consumer.commitSync();
      }
      assertThat(released).isEqualTo(3);
    }
  }

  /**
   * Creates this test's topic, of one partition, and its share group's acquisition lock; its
   * consumers heartbeat every half second, so that each joins in about that rather than five
   * seconds.
   */
  private void createQueue(Duration lock) {
    TestKafka.createTopics(1, topic);
    TestShareGroups.configure(group, lock, Duration.ofMillis(500));
  }

  /**
   * Stops the loops, then checks that nothing is left in the queue: every record was acknowledged
   * or rejected, none archived or waiting to be delivered again.
   */
  private void assertQueueEmpty() {
    loops.forEach(DedupShareLoop::close);
    assertThat(TestShareGroups.remaining(group, topic, Duration.ofSeconds(3))).isEmpty();
  }

  private void send(String orderNo, String value) throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(topic, value);
    record.headers().add(LoopFixture.KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
    fixture.producer().send(record).get();
  }

  private static String orderNo(ConsumerRecord<?, ?> record) {
    return LoopFixture.orderNo(record);
  }

  private interface Customizer {
    DedupShareLoop.Builder<String, String> apply(DedupShareLoop.Builder<String, String> builder);
  }

  private void start(Duration lease, RecordHandler<String, String> handler, Customizer customizer) {
    start(lease, handler, customizer, record -> {});
  }

  /** Starts a share loop; {@code delivered} sees every record offered to its processor. */
  private void start(
      Duration lease,
      RecordHandler<String, String> handler,
      Customizer customizer,
      java.util.function.Consumer<ConsumerRecord<String, String>> delivered) {
    start(lease, handler, customizer, delivered, KafkaShareConsumer::new);
  }

  /** Starts a share loop on the consumer {@code consumers} makes. */
  private void start(
      Duration lease,
      RecordHandler<String, String> handler,
      Customizer customizer,
      java.util.function.Consumer<ConsumerRecord<String, String>> delivered,
      Function<Map<String, Object>, ShareConsumer<String, String>> consumers) {
    threads.execute(loop(lease, handler, customizer, delivered, consumers));
  }

  /**
   * Runs share loops one after another, a new one each time the last ended on an Error, as an
   * application that restarts its loop would.
   */
  private void startRestartingOnError(
      RecordHandler<String, String> handler, Customizer customizer) {
    startRestartingOnError(
        () ->
            loop(
                Duration.ofMinutes(5), handler, customizer, record -> {}, KafkaShareConsumer::new));
  }

  /**
   * Runs share loops one after another on {@code losing}, whose claims' answers a test can turn
   * into an Error, all through one executor; {@code claimsPerPoll} claims a poll's keys together.
   */
  private void startRestartingOnError(
      ReplyLosingStore losing,
      boolean claimsPerPoll,
      RecordHandler<String, String> handler,
      Customizer customizer) {
    IdempotentExecutor executor =
        IdempotentExecutor.builder(losing.store()).lease(Duration.ofMinutes(5)).build();
    executors.add(executor);
    startRestartingOnError(
        () ->
            loop(
                executor,
                claimsPerPoll,
                handler,
                customizer,
                record -> {},
                KafkaShareConsumer::new));
  }

  private void startRestartingOnError(Supplier<DedupShareLoop<String, String>> loopAfterLoop) {
    threads.execute(
        () -> {
          while (restarting.get()) {
            try {
              loopAfterLoop.get().run();
              return; // closed
            } catch (Error e) {
              loopsEnded.incrementAndGet();
              // The loop ended on an Error: start another a moment later, once the broker has
              // taken back what the closed consumer held.
              try {
                Thread.sleep(1_000);
              } catch (InterruptedException stop) {
                return;
              }
            }
          }
        });
  }

  /**
   * Sends one record and runs loops on it, restarted on an Error, whose claim of it (a poll's batch
   * claim where {@code claimsPerPoll}) meets an OutOfMemoryError once the database has committed
   * it, as many times in a row as the deliveries after which the broker archives a record.
   *
   * @return the handler's runs, each as order number/delivery, once there is one
   */
  private List<String> runsOfARecordWhoseClaimMeetsAnErrorAgainAndAgain(
      String orderNo, boolean claimsPerPoll) throws Exception {
    createQueue(Duration.ofSeconds(5));
    send(orderNo, "fine");
    ReplyLosingStore losing = ReplyLosingStore.in(fixture.store());
    List<String> runs = new CopyOnWriteArrayList<>();
    startRestartingOnError(
        losing,
        claimsPerPoll,
        record -> runs.add(orderNo(record) + "/" + record.deliveryCount().orElse((short) 0)),
        b -> b);
    String claim = claimsPerPoll ? "batch claim" : "claim";
    for (int lost = 1; lost <= DedupShareLoop.DEFAULT_DELIVERY_COUNT_LIMIT; lost++) {
      losing.loseNextClaimReplyTo(
          new OutOfMemoryError("Java heap space, reading the " + claim + "'s answer"));
      int expected = lost;
      await()
          .atMost(WAIT)
          .alias("the " + claim + " answered with the Error " + expected + " times")
          .until(() -> losing.repliesLost() >= expected);
    }
    await()
        .atMost(WAIT)
        .alias("the record applied; loops ended on the Error: " + loopsEnded)
        .until(() -> !runs.isEmpty());
    return runs;
  }

  /** A share loop on the consumer {@code consumers} makes, not started. */
  private DedupShareLoop<String, String> loop(
      Duration lease,
      RecordHandler<String, String> handler,
      Customizer customizer,
      java.util.function.Consumer<ConsumerRecord<String, String>> delivered,
      Function<Map<String, Object>, ShareConsumer<String, String>> consumers) {
    IdempotentExecutor executor = IdempotentExecutor.builder(fixture.store()).lease(lease).build();
    executors.add(executor);
    return loop(executor, true, handler, customizer, delivered, consumers);
  }

  /** A share loop of {@code executor}, not started. */
  private DedupShareLoop<String, String> loop(
      IdempotentExecutor executor,
      boolean claimsPerPoll,
      RecordHandler<String, String> handler,
      Customizer customizer,
      java.util.function.Consumer<ConsumerRecord<String, String>> delivered,
      Function<Map<String, Object>, ShareConsumer<String, String>> consumers) {
    IdempotentRecordHandler<String, String> records =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType(LoopFixture.BIZ_TYPE)
            .key(KeyExtractors.header(LoopFixture.KEY_HEADER))
            .groupId(group)
            .claimsPerPoll(claimsPerPoll)
            .handler(handler)
            .build();
    RecordProcessor<String, String> processor =
        new RecordProcessor<>() {
          @Override
          public Outcome process(ConsumerRecord<String, String> record) {
            delivered.accept(record);
            Outcome outcome = records.process(record);
            completed.add(record.offset());
            return outcome;
          }

          @Override
          public java.util.OptionalInt attempts(ConsumerRecord<String, String> record) {
            return records.attempts(record);
          }

          @Override
          public void prepare(List<ConsumerRecord<String, String>> polled) {
            records.prepare(polled);
          }

          @Override
          public List<ConsumerRecord<String, String>> settle() {
            List<ConsumerRecord<String, String>> unrecorded = records.settle();
            afterSettle.run();
            return unrecorded;
          }
        };
    DedupShareLoop<String, String> loop =
        customizer
            .apply(
                DedupShareLoop.builder(
                        TestShareGroups.consumerConfig(group), List.of(topic), processor)
                    .deadLetterHandler(
                        KafkaDeadLetterPublisher.builder(dltProducer).groupId(group).build())
                    .holdBackOff(Duration.ofMillis(200), Duration.ofSeconds(1))
                    .closeTimeout(Duration.ofSeconds(10)))
            .build(consumers);
    loops.add(loop);
    return loop;
  }
}
