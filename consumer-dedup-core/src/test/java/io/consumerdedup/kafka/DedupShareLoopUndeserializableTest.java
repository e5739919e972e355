package io.consumerdedup.kafka;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.testing.TestKafka;
import io.consumerdedup.testing.TestShareGroups;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Function;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.consumer.ShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.IntegerDeserializer;
import org.apache.kafka.common.serialization.IntegerSerializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.slf4j.LoggerFactory;

/**
 * What a share loop does with records whose value the deserializer rejects, when their dead letter
 * is slow or fails: against the real broker's share groups.
 */
class DedupShareLoopUndeserializableTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("share_undeserializable");

  private static final Duration WAIT = Duration.ofSeconds(30);
  private static final Duration CLOSE_TIMEOUT = Duration.ofSeconds(1);

  private final ListAppender<ILoggingEvent> loopLog = new ListAppender<>();
  private final Logger loopLogger = (Logger) LoggerFactory.getLogger(DedupShareLoop.class);
  private final ExecutorService threads = Executors.newCachedThreadPool();
  private final KafkaProducer<byte[], byte[]> raw = TestKafka.rawProducer();
  private final KafkaProducer<String, Integer> typed =
      TestKafka.producer(new StringSerializer(), new IntegerSerializer());
  private final List<DedupShareLoop<String, Integer>> loops = new CopyOnWriteArrayList<>();
  private final List<Integer> handled = new CopyOnWriteArrayList<>();
  private String topic;
  private String group;

  @BeforeEach
  void setUp() {
    topic = fixture.topic();
    group = fixture.group();
    TestKafka.createTopics(1, topic);
    TestShareGroups.configure(group, Duration.ofSeconds(3), Duration.ofMillis(500));
    loopLog.start();
    loopLogger.addAppender(loopLog);
  }

  @AfterEach
  void tearDown() {
    loops.forEach(DedupShareLoop::close);
    loopLogger.detachAppender(loopLog);
    threads.shutdownNow();
    typed.close();
    raw.close();
  }

  /**
   * The dead letter of an undeserializable record hangs (a producer that cannot reach the
   * dead-letter topic waits out its send timeout, 30 s by default) while the application stops the
   * loop. Written on the loop's own thread, it held the stop: close() gave up after twice the close
   * timeout and a grace, with the loop still sending and its consumer open.
   */
  @Test
  void aHangingDeadLetterOfAnUndeserializableRecordDoesNotHoldTheStopPastItsBound()
      throws Exception {
    CountDownLatch sending = new CountDownLatch(1);
    CountDownLatch sendMayEnd = new CountDownLatch(1);
    DedupShareLoop<String, Integer> loop =
        loop(
            new DeadLetterHandler<>() {
              @Override
              public void deadLetter(ConsumerRecord<String, Integer> record, Exception reason) {}

              @Override
              public void deadLetterUndeserializable(
                  ConsumerRecord<byte[], byte[]> record, Exception reason) {
                sending.countDown();
                try {
                  sendMayEnd.await(WAIT.toSeconds(), TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                  Thread.currentThread().interrupt();
                }
              }
            });
    Future<?> running = threads.submit(loop);
    try {
      raw.send(new ProducerRecord<>(topic, new byte[] {1, 2, 3})).get();
      assertThat(sending.await(WAIT.toSeconds(), TimeUnit.SECONDS)).isTrue();

      long started = System.nanoTime();
      loop.close();
      Duration took = Duration.ofNanos(System.nanoTime() - started);

      assertThat(took)
          .as(
              "close() with a dead letter hanging returns within twice the close timeout of %s",
              CLOSE_TIMEOUT)
          .isLessThan(CLOSE_TIMEOUT.multipliedBy(2).plusMillis(2_500));
      running.get(1, TimeUnit.SECONDS); // the loop has ended, its consumer closed
    } finally {
      sendMayEnd.countDown();
    }
    assertThat(warnings())
        .as("the log names the record whose dead letter outlasted the close timeout")
        .anySatisfy(message -> assertThat(message).contains(topic + "-0@0").contains("in hand"));
  }

  /**
   * Two undeserializable records in a row: the second one's poll carried the first one's REJECT,
   * and a poll that throws loses the acknowledgements it carries, so the first record came back and
   * was dead-lettered a second time.
   */
  @Test
  void undeserializableRecordsInARowAreEachDeadLetteredOnce() throws Exception {
    IntegerSerializer integers = new IntegerSerializer();
    raw.send(new ProducerRecord<>(topic, new byte[] {1, 2, 3})).get();
    raw.send(new ProducerRecord<>(topic, new byte[] {4, 5, 6})).get();
    raw.send(new ProducerRecord<>(topic, integers.serialize(topic, 100))).get();
    threads.execute(loop(publisher()));

    await().atMost(WAIT).untilAsserted(() -> assertThat(handled).containsExactly(100));
    assertThat(TestKafka.readRawFromStart(topic + "-dlt", 3, Duration.ofSeconds(5)))
        .as("one dead letter for each undeserializable record")
        .extracting(ConsumerRecord::value)
        .containsExactly(new byte[] {1, 2, 3}, new byte[] {4, 5, 6});
    loops.forEach(DedupShareLoop::close);
    assertThat(TestShareGroups.remaining(group, topic, Duration.ofSeconds(3))).isEmpty();
  }

  /**
   * The dead-letter handler throws an Error for an undeserializable record, a second into its send:
   * a failed try like any other, made again after the hold back-off by the same loop, which goes
   * on. Before, the loop ended on it and its close gave the record back, a delivery counted, for
   * the application's next loop to write the dead letter.
   */
  @Test
  void anErrorFromTheDeadLetterHandlerIsAFailedTryAndTheSameLoopWritesTheDeadLetter()
      throws Exception {
    TestShareGroups.configure(group, Duration.ofSeconds(30), Duration.ofMillis(500));
    AtomicBoolean failed = new AtomicBoolean();
    DeadLetterHandler<String, Integer> publisher = publisher();
    DeadLetterHandler<String, Integer> failingOnce =
        new DeadLetterHandler<>() {
          @Override
          public void deadLetter(ConsumerRecord<String, Integer> record, Exception reason) {
            publisher.deadLetter(record, reason);
          }

          @Override
          public void deadLetterUndeserializable(
              ConsumerRecord<byte[], byte[]> record, Exception reason) {
            if (failed.compareAndSet(false, true)) {
              try {
                Thread.sleep(1_000); // a send under way, the loop waiting for its decision
              } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
              }
              throw new StackOverflowError("dead-letter handler overflowed");
            }
            publisher.deadLetterUndeserializable(record, reason);
          }
        };
    raw.send(new ProducerRecord<>(topic, new byte[] {1, 2, 3})).get();
    Future<?> running = threads.submit(loop(failingOnce));

    assertThat(TestKafka.readRawFromStart(topic + "-dlt", 1, WAIT))
        .extracting(ConsumerRecord::value)
        .containsExactly(new byte[] {1, 2, 3});
    assertThat(failed).as("the dead-letter handler threw its Error").isTrue();
    assertThat(running.isDone())
        .as("the loop goes on past the dead-letter handler's Error")
        .isFalse();
    loops.forEach(DedupShareLoop::close);
    assertThat(TestShareGroups.remaining(group, topic, Duration.ofSeconds(3))).isEmpty();
    assertThat(TestKafka.readRawWritten(topic + "-dlt"))
        .as("the record given back by the loop that ended is dead-lettered once")
        .hasSize(1);
  }

  /**
   * A deserializer that throws an Error (a StackOverflowError on a deeply nested payload): kafka-
   * clients passes it on bare, without the record, so it cannot be dead-lettered. The loop ended
   * and its close gave the record back, a delivery spent; restarted on it five times, the loop had
   * the broker archive it, and nothing in the log said why the record was gone.
   */
  @Test
  void aDeserializerErrorEndsTheLoopAndTheLogSaysTheRecordCannotBeDeadLettered() throws Exception {
    Logger pollsLogger = (Logger) LoggerFactory.getLogger(SharePolls.class);
    pollsLogger.addAppender(loopLog);
    try {
      raw.send(new ProducerRecord<>(topic, new byte[] {0, 0, 0, 7})).get();
      Future<?> run =
          threads.submit(
              loop(
                  publisher(),
                  value -> {},
                  config -> {
                    Map<String, Object> overflowing = new HashMap<>(config);
                    overflowing.put(
                        ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG,
                        OverflowingDeserializer.class);
                    return new KafkaShareConsumer<>(overflowing);
                  }));

      assertThatThrownBy(() -> run.get(WAIT.toSeconds(), TimeUnit.SECONDS))
          .isInstanceOf(ExecutionException.class)
          .hasCauseInstanceOf(StackOverflowError.class);
      assertThat(
              loopLog.list.stream()
                  .filter(event -> event.getLevel() == Level.ERROR)
                  .map(ILoggingEvent::getFormattedMessage))
          .as("what the log says")
          .anySatisfy(
              message ->
                  assertThat(message)
                      .contains("A poll of share group " + group + " threw")
                      .contains("StackOverflowError")
                      .contains("without a dead letter"));
    } finally {
      pollsLogger.detachAppender(loopLog);
    }
  }

  /** A value deserializer that overflows its stack on every record, as on a deeply nested one. */
  public static final class OverflowingDeserializer implements Deserializer<Integer> {
    @Override
    public Integer deserialize(String topic, byte[] data) {
      throw new StackOverflowError("nested too deep");
    }

    @Override
    public Integer deserialize(String topic, Headers headers, byte[] data) {
      throw new StackOverflowError("nested too deep");
    }

    @Override
    public Integer deserialize(String topic, Headers headers, ByteBuffer data) {
      throw new StackOverflowError("nested too deep");
    }
  }

  /**
   * A record the deserializer rejects behind one whose lock renewal the consumer refuses (its
   * handler outlasted the lock, the thread stalled): the poll returned the first record and kept
   * the rejection for the next poll, and once the refused record was forgotten that next poll was
   * the one that was to take renewed records back. It threw there, outside the loop's handling of
   * such records, and ended the loop: the rejected record was never dead-lettered by it, and the
   * records after it waited for another consumer.
   */
  @Test
  void anUndeserializableRecordBehindARefusedRenewalIsDeadLetteredAndTheLoopGoesOn()
      throws Exception {
    IntegerSerializer integers = new IntegerSerializer();
    raw.send(new ProducerRecord<>(topic, integers.serialize(topic, 100)));
    raw.send(new ProducerRecord<>(topic, new byte[] {1, 2, 3}));
    raw.send(new ProducerRecord<>(topic, integers.serialize(topic, 200))).get();
    AtomicBoolean refused = new AtomicBoolean();
    Future<?> running =
        threads.submit(
            loop(
                publisher(),
                value -> {
                  if (value == 100 && !refused.get()) {
                    Thread.sleep(2_000); // past the renewal, a third of the 3 s lock
                  }
                },
                config -> refusingFirstRenewal(config, refused)));

    // 100 twice: its first run outlasted the refused renewal, and the broker delivered it again.
    await()
        .atMost(WAIT)
        .until(
            () ->
                handled.contains(200) && Collections.frequency(handled, 100) == 2
                    || running.isDone());
    assertThat(refused).as("the consumer refused the renewal").isTrue();
    assertThat(running).as("the loop still runs").isNotDone();
    assertThat(TestKafka.readRawFromStart(topic + "-dlt", 1, Duration.ofSeconds(5)))
        .as("the undeserializable record is dead-lettered once")
        .extracting(ConsumerRecord::value)
        .containsExactly(new byte[] {1, 2, 3});
    loops.forEach(DedupShareLoop::close);
    running.get(5, TimeUnit.SECONDS);
    assertThat(TestShareGroups.remaining(group, topic, Duration.ofSeconds(3))).isEmpty();
  }

  /**
   * Two records the deserializer rejects behind one whose renewal the consumer took and the broker
   * refused (its lock had run out): the record stays out for renewal, never to come back, while the
   * first rejected record is dead-lettered. Its REJECT then went with the poll that was to take the
   * renewed record back, which threw for the second rejected record and lost it: the first record
   * came back once its lock ran out and was dead-lettered a second time.
   */
  @Test
  void rejectedRecordsInARowBehindARenewalTheBrokerRefusedAreEachDeadLetteredOnce()
      throws Exception {
    IntegerSerializer integers = new IntegerSerializer();
    raw.send(new ProducerRecord<>(topic, integers.serialize(topic, 100)));
    raw.send(new ProducerRecord<>(topic, new byte[] {1, 2, 3}));
    raw.send(new ProducerRecord<>(topic, new byte[] {4, 5, 6}));
    raw.send(new ProducerRecord<>(topic, integers.serialize(topic, 200))).get();
    AtomicBoolean refused = new AtomicBoolean();
    threads.execute(
        loop(
            publisher(),
            value -> {
              if (value == 100 && !refused.get()) {
                Thread.sleep(2_000); // past the renewal, a third of the 3 s lock
              }
            },
            config -> refusedByTheBrokerOnFirstRenewal(config, refused)));

    await().atMost(WAIT).until(() -> handled.contains(200));
    assertThat(refused).as("the broker refused the renewal").isTrue();
    assertThat(TestKafka.readRawFromStart(topic + "-dlt", 3, Duration.ofSeconds(6)))
        .as("one dead letter for each undeserializable record")
        .extracting(ConsumerRecord::value)
        .containsExactly(new byte[] {1, 2, 3}, new byte[] {4, 5, 6});
    loops.forEach(DedupShareLoop::close);
    assertThat(TestShareGroups.remaining(group, topic, Duration.ofSeconds(3))).isEmpty();
  }

  /**
   * A record whose handler outlasts the lock, with a record the deserializer rejects and a healthy
   * one right behind it, fetched together. kafka-clients returns the first record and keeps the
   * other two in its buffer, unseen and unrenewable, until the first is acknowledged: their locks
   * run out there (the healthy one is delivered again, and handled again by this processor, which
   * is not idempotent). The rejected record was dead-lettered then, its REJECT refused by the
   * broker, and dead-lettered again when the broker delivered it again.
   */
  @Test
  void aRejectedRecordWhoseLockRanOutBehindALongHandlerIsDeadLetteredOnce() throws Exception {
    IntegerSerializer integers = new IntegerSerializer();
    raw.send(new ProducerRecord<>(topic, integers.serialize(topic, 100)));
    raw.send(new ProducerRecord<>(topic, new byte[] {1, 2, 3}));
    raw.send(new ProducerRecord<>(topic, integers.serialize(topic, 200))).get();
    threads.execute(
        loop(
            publisher(),
            value -> {
              if (value == 100) {
                Thread.sleep(7_000); // over two of the 3 s locks
              }
            },
            KafkaShareConsumer::new));

    await()
        .atMost(WAIT)
        .alias("the healthy record behind the rejected one delivered again, its lock run out")
        .until(() -> Collections.frequency(handled, 200) == 2);
    // On a busy machine a renewal of the long handler's lock can come too late (a 3 s lock renewed
    // every second): the broker delivers that record again and this processor, not idempotent,
    // runs its 7 s handler again before acknowledging it. Not what this test is about.
    await()
        .atMost(WAIT)
        .alias("every record acknowledged")
        .until(() -> TestShareGroups.lag(group, topic) == 0);
    assertThat(TestKafka.readRawFromStart(topic + "-dlt", 2, Duration.ofSeconds(5)))
        .as("one dead letter for the undeserializable record")
        .extracting(ConsumerRecord::value)
        .containsExactly(new byte[] {1, 2, 3});
    assertThat(handled).as("records handled").containsOnly(100, 200);
  }

  /**
   * As above, with a second consumer in the group: the rejected record's lock runs out in the first
   * consumer's buffer, the broker delivers it to the second, which dead-letters it. The first loop
   * took the lock of the record its poll then threw for as counted from that poll, not from the
   * fetch long before, and dead-lettered it a second time.
   */
  @Test
  void aRejectedRecordWhoseLockRanOutInTheBufferIsNotDeadLetteredAgainOnceAnotherConsumerHasIt()
      throws Exception {
    IntegerSerializer integers = new IntegerSerializer();
    raw.send(new ProducerRecord<>(topic, integers.serialize(topic, 100)));
    raw.send(new ProducerRecord<>(topic, new byte[] {1, 2, 3}));
    raw.send(new ProducerRecord<>(topic, integers.serialize(topic, 200))).get();
    CountDownLatch longHandlerRuns = new CountDownLatch(1);
    threads.execute(
        loop(
            publisher(),
            value -> {
              if (value == 100) {
                longHandlerRuns.countDown();
                Thread.sleep(7_000); // over two of the 3 s locks
              }
            },
            KafkaShareConsumer::new));
    assertThat(longHandlerRuns.await(WAIT.toSeconds(), TimeUnit.SECONDS)).isTrue();
    threads.execute(loop(publisher())); // takes what the first consumer's locks let go

    await()
        .atMost(WAIT)
        .alias("the long handler's record accepted, the first loop polling again")
        .until(() -> handled.contains(100));
    // Time for a second dead letter, had the first loop written one: it would on its first poll
    // after the long handler, within a second of it.
    assertThat(TestKafka.readRawFromStart(topic + "-dlt", 2, Duration.ofSeconds(5)))
        .as("one dead letter for the undeserializable record")
        .extracting(ConsumerRecord::value)
        .containsExactly(new byte[] {1, 2, 3});
    assertThat(warnings())
        .anyMatch(
            warning -> warning.contains("@1 (group " + group + ") is not dead-lettered here"));
    // As in the test above, a renewal that comes too late on a busy machine has the long
    // handler's record run again, by either consumer, before it is acknowledged.
    await()
        .atMost(WAIT)
        .alias("every record acknowledged")
        .until(() -> TestShareGroups.lag(group, topic) == 0);
    loops.forEach(DedupShareLoop::close);
  }

  /**
   * A record the deserializer rejects, fetched with a healthy one behind it, whose dead letter
   * takes between two thirds and all of the 3 s lock. kafka-clients keeps the healthy record in its
   * buffer meanwhile, unrenewable, its lock running from the fetch. The loop took it for one just
   * acquired and renewed it a third of the lock after it was returned: past its lock, so the broker
   * delivered it again and it was handled a second time.
   */
  @Test
  void aRecordFetchedBehindARejectedOneWhoseDeadLetterIsSlowKeepsItsLock() throws Exception {
    IntegerSerializer integers = new IntegerSerializer();
    raw.send(new ProducerRecord<>(topic, new byte[] {7, 8, 9}));
    raw.send(new ProducerRecord<>(topic, integers.serialize(topic, 200))).get();
    DeadLetterHandler<String, Integer> publisher = publisher();
    DeadLetterHandler<String, Integer> slowPublisher =
        new DeadLetterHandler<>() {
          @Override
          public void deadLetter(ConsumerRecord<String, Integer> record, Exception reason) {
            publisher.deadLetter(record, reason);
          }

          @Override
          public void deadLetterUndeserializable(
              ConsumerRecord<byte[], byte[]> record, Exception reason) {
            try {
              Thread.sleep(2_300); // between two thirds and all of the 3 s lock
            } catch (InterruptedException e) {
              Thread.currentThread().interrupt();
            }
            publisher.deadLetterUndeserializable(record, reason);
          }
        };
    threads.execute(
        loop(
            slowPublisher,
            value -> Thread.sleep(1_500), // past the healthy record's lock, had it not been renewed
            KafkaShareConsumer::new));

    await().atMost(WAIT).until(() -> handled.contains(200));
    Thread.sleep(4_000); // time for the broker to deliver it again, had its lock run out
    loops.forEach(DedupShareLoop::close);
    assertThat(handled).as("records handled").containsExactly(200);
    assertThat(TestKafka.readRawWritten(topic + "-dlt"))
        .as("one dead letter for the undeserializable record")
        .extracting(ConsumerRecord::value)
        .containsExactly(new byte[] {7, 8, 9});
    assertThat(TestShareGroups.remaining(group, topic, Duration.ofSeconds(3))).isEmpty();
  }

  /**
   * A real share consumer that takes the first RENEW, which the broker then refuses, as it does a
   * renewal of a lock that ran out: the record goes back to the broker and is not handed back.
   */
  @SuppressWarnings("unchecked")
  private static ShareConsumer<String, Integer> refusedByTheBrokerOnFirstRenewal(
      Map<String, Object> config, AtomicBoolean refused) {
    AtomicReference<ShareConsumer<String, Integer>> consumer = new AtomicReference<>();
    consumer.set(
        InterceptedShareConsumer.of(
            config,
            (method, args, call) -> {
              if (method.getName().equals("acknowledge")
                  && args.length == 2
                  && args[1] == AcknowledgeType.RENEW
                  && refused.compareAndSet(false, true)) {
                consumer
                    .get()
                    .acknowledge(
                        (ConsumerRecord<String, Integer>) args[0], AcknowledgeType.RELEASE);
                return null;
              }
              return call.proceed();
            }));
    return consumer.get();
  }

  /**
   * A real share consumer that refuses the first RENEW as a consumer that lost the record's
   * acquisition does: the record goes back to the broker (released) and the acknowledgement throws.
   */
  @SuppressWarnings("unchecked")
  private static ShareConsumer<String, Integer> refusingFirstRenewal(
      Map<String, Object> config, AtomicBoolean refused) {
    AtomicReference<ShareConsumer<String, Integer>> consumer = new AtomicReference<>();
    consumer.set(
        InterceptedShareConsumer.of(
            config,
            (method, args, call) -> {
              if (method.getName().equals("acknowledge")
                  && args.length == 2
                  && args[1] == AcknowledgeType.RENEW
                  && refused.compareAndSet(false, true)) {
                consumer
                    .get()
                    .acknowledge(
                        (ConsumerRecord<String, Integer>) args[0], AcknowledgeType.RELEASE);
                throw new IllegalStateException("The record's acquisition was lost");
              }
              return call.proceed();
            }));
    return consumer.get();
  }

  private DeadLetterHandler<String, Integer> publisher() {
    return KafkaDeadLetterPublisher.builder(typed).rawProducer(raw).groupId(group).build();
  }

  private DedupShareLoop<String, Integer> loop(DeadLetterHandler<String, Integer> deadLetters) {
    return loop(deadLetters, value -> {}, KafkaShareConsumer::new);
  }

  /** What a handler does with a value before it counts it as handled. */
  private interface Handling {
    void handle(int value) throws Exception;
  }

  private DedupShareLoop<String, Integer> loop(
      DeadLetterHandler<String, Integer> deadLetters,
      Handling handling,
      Function<Map<String, Object>, ShareConsumer<String, Integer>> consumers) {
    Map<String, Object> config = TestShareGroups.consumerConfig(group);
    config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, IntegerDeserializer.class);
    DedupShareLoop<String, Integer> loop =
        DedupShareLoop.<String, Integer>builder(
                config,
                List.of(topic),
                record -> {
                  try {
                    handling.handle(record.value());
                  } catch (Exception e) {
                    throw new IllegalStateException(e);
                  }
                  handled.add(record.value());
                  return Outcome.PROCESSED;
                })
            .deadLetterHandler(deadLetters)
            .closeTimeout(CLOSE_TIMEOUT)
            .build(consumers);
    loops.add(loop);
    return loop;
  }

  private List<String> warnings() {
    return loopLog.list.stream()
        .filter(event -> event.getLevel() == Level.WARN)
        .map(ILoggingEvent::getFormattedMessage)
        .toList();
  }
}
