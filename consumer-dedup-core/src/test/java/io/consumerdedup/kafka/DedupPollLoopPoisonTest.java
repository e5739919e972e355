package io.consumerdedup.kafka;

import static io.consumerdedup.kafka.LoopFixture.BIZ_TYPE;
import static io.consumerdedup.kafka.LoopFixture.KEY_HEADER;
import static io.consumerdedup.kafka.LoopFixture.WAIT;
import static io.consumerdedup.kafka.LoopFixture.header;
import static io.consumerdedup.kafka.LoopFixture.orderNo;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import io.consumerdedup.core.DedupAttemptsExhaustedException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupKeyMalformedException;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStoreUnavailableException;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RecordDeserializationException;
import org.apache.kafka.common.serialization.IntegerDeserializer;
import org.apache.kafka.common.serialization.IntegerSerializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.slf4j.LoggerFactory;

/**
 * Records that fail the same way on every delivery (a value the deserializer rejects, a handler
 * that always throws), through restarts of the loop: dead-lettered once retrying cannot help, never
 * passed without a dead letter, and not granted fresh attempts by a restart.
 */
class DedupPollLoopPoisonTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("loop_poison");

  private static final String RECORD_KEY = "customer-7";

  /** Three bytes where {@link IntegerDeserializer} expects four. */
  private static final byte[] NOT_AN_INTEGER = {0x7f, 0x00, 0x01};

  private static KafkaProducer<String, Integer> amountProducer;
  private static KafkaProducer<byte[], byte[]> rawProducer;

  private final Effects effects = new Effects();
  private IdempotentExecutor executor;
  private String topic;
  private String group;
  private ListAppender<ILoggingEvent> loopLog;

  @BeforeAll
  static void setUpClass() {
    amountProducer = TestKafka.producer(new StringSerializer(), new IntegerSerializer());
    rawProducer = TestKafka.rawProducer();
  }

  @AfterAll
  static void tearDownClass() {
    amountProducer.close();
    rawProducer.close();
  }

  @BeforeEach
  void setUp() {
    topic = fixture.topic();
    group = fixture.group();
    executor = IdempotentExecutor.builder(fixture.store()).build();
    loopLog = new ListAppender<>();
    loopLog.start();
    ((Logger) LoggerFactory.getLogger(DedupPollLoop.class)).addAppender(loopLog);
  }

  @AfterEach
  void tearDown() {
    ((Logger) LoggerFactory.getLogger(DedupPollLoop.class)).detachAppender(loopLog);
    executor.close();
  }

  // --- records whose value cannot be deserialized ---

  @Test
  void aValueTheDeserializerRejectsIsDeadLetteredWithItsRawBytesAndTheLoopMovesOn()
      throws Exception {
    sendAnUndeserializableValueBetweenGoodRecords("V", "W");
    sendAmount(1, "W-2", 400);
    DeadLetterHandler<String, Integer> publisher =
        KafkaDeadLetterPublisher.builder(amountProducer)
            .rawProducer(rawProducer)
            .groupId(group)
            .build();

    try (RunningLoop running = RunningLoop.start(amountLoop(publisher))) {
      awaitCommitted(Map.of(partition(0), 3L, partition(1), 2L));
    }

    assertThat(effects.all())
        .containsOnly(
            Map.entry("V-1", 1), Map.entry("V-2", 1), Map.entry("W-1", 1), Map.entry("W-2", 1));
    List<ConsumerRecord<byte[], byte[]>> dlt = TestKafka.readRawFromStart(topic + "-dlt", 1, WAIT);
    assertThat(dlt).hasSize(1);
    ConsumerRecord<byte[], byte[]> deadLetter = dlt.get(0);
    assertThat(deadLetter.key()).isEqualTo(RECORD_KEY.getBytes(StandardCharsets.UTF_8));
    assertThat(deadLetter.value()).isEqualTo(NOT_AN_INTEGER);
    assertThat(header(deadLetter, KEY_HEADER)).isEqualTo("V-bad");
    assertThat(header(deadLetter, "trace-id")).isEqualTo("trace-of-V-bad");
    assertThat(header(deadLetter, KafkaDeadLetterPublisher.EXCEPTION_CLASS_HEADER))
        .isEqualTo(RecordDeserializationException.class.getName());
    assertThat(header(deadLetter, KafkaDeadLetterPublisher.EXCEPTION_MESSAGE_HEADER))
        .contains("VALUE", topic + "-0", "offset 1", "IntegerDeserializer is not 4");
    assertThat(header(deadLetter, KafkaDeadLetterPublisher.UNDESERIALIZABLE_HEADER))
        .isEqualTo("value");
    assertThat(header(deadLetter, KafkaDeadLetterPublisher.ORIGINAL_TOPIC_HEADER)).isEqualTo(topic);
    assertThat(header(deadLetter, KafkaDeadLetterPublisher.ORIGINAL_PARTITION_HEADER))
        .isEqualTo("0");
    assertThat(header(deadLetter, KafkaDeadLetterPublisher.ORIGINAL_OFFSET_HEADER)).isEqualTo("1");
    assertThat(header(deadLetter, KafkaDeadLetterPublisher.ORIGINAL_GROUP_HEADER)).isEqualTo(group);

    // Restarted over the same group, the loop starts after the dead letter and re-applies nothing.
    sendAmount(0, "V-3", 500);
    try (RunningLoop restarted = RunningLoop.start(amountLoop(publisher))) {
      awaitCommitted(Map.of(partition(0), 4L, partition(1), 2L));
    }
    assertThat(effects.all())
        .containsOnly(
            Map.entry("V-1", 1),
            Map.entry("V-2", 1),
            Map.entry("V-3", 1),
            Map.entry("W-1", 1),
            Map.entry("W-2", 1));
    assertThat(TestKafka.endOffset(new TopicPartition(topic + "-dlt", 0))).isEqualTo(1);
  }

  @Test
  void withoutARawProducerAnUndeserializableValueIsHeldAndTheLogSaysWhatToConfigure()
      throws Exception {
    sendAnUndeserializableValueBetweenGoodRecords("X", "Y");
    AtomicInteger rawAttempts = new AtomicInteger();
    DeadLetterHandler<String, Integer> typedOnly =
        KafkaDeadLetterPublisher.builder(amountProducer).groupId(group).build();
    DeadLetterHandler<String, Integer> counting =
        new DeadLetterHandler<>() {
          @Override
          public void deadLetter(ConsumerRecord<String, Integer> record, Exception reason) {
            typedOnly.deadLetter(record, reason);
          }

          @Override
          public void deadLetterUndeserializable(
              ConsumerRecord<byte[], byte[]> record, Exception reason) {
            rawAttempts.incrementAndGet();
            typedOnly.deadLetterUndeserializable(record, reason);
          }
        };

    try (RunningLoop running = RunningLoop.start(amountLoop(counting))) {
      awaitCommitted(Map.of(partition(0), 1L, partition(1), 1L));
      await().atMost(WAIT).until(() -> rawAttempts.get() >= 3);
      // The other partition keeps moving while this one is held.
      sendAmount(1, "Y-2", 400);
      awaitCommitted(Map.of(partition(1), 2L));
      assertThat(TestKafka.committedOffsets(group)).containsEntry(partition(0), 1L);
    }

    assertThat(effects.all())
        .containsOnly(Map.entry("X-1", 1), Map.entry("Y-1", 1), Map.entry("Y-2", 1));
    assertThat(TestKafka.endOffset(new TopicPartition(topic + "-dlt", 0))).isZero();
    assertThat(loopLog.list)
        .filteredOn(event -> event.getLevel() == Level.ERROR)
        .filteredOn(event -> event.getFormattedMessage().startsWith("Could not dead-letter"))
        .isNotEmpty()
        .allSatisfy(
            event -> {
              assertThat(event.getFormattedMessage()).contains(topic + "-0@1", "group " + group);
              assertThat(event.getThrowableProxy().getMessage()).contains("rawProducer(...)");
            });
  }

  // --- a dead letter the broker acknowledges late ---

  @Test
  void aDeadLetterAcknowledgedAfterTheSendTimeoutIsWrittenOnceNotOncePerTry() throws Exception {
    TestKafka.createTopics(1, topic, topic + "-dlt");
    ProducerRecord<String, String> noKey =
        new ProducerRecord<>(topic, 0, RECORD_KEY, "charge without an order number");
    fixture.producer().send(noKey).get();
    // Each send waits 2 s in the producer before it goes out, as it would for a broker slow to
    // answer; the publisher gives up waiting after 300 ms, and the producer still writes it.
    Map<String, Object> config = new HashMap<>();
    config.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, TestKafka.bootstrapServers());
    config.put(ProducerConfig.ACKS_CONFIG, "all");
    config.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, 1);
    config.put(ProducerConfig.LINGER_MS_CONFIG, 2000);
    try (KafkaProducer<String, String> slow =
        new KafkaProducer<>(config, new StringSerializer(), new StringSerializer())) {
      DeadLetterHandler<String, String> publisher =
          KafkaDeadLetterPublisher.builder(slow)
              .groupId(group)
              .sendTimeout(Duration.ofMillis(300))
              .build();

      try (RunningLoop running =
          RunningLoop.start(
              loop(payments(executor, record -> effects.apply(record.value())), publisher))) {
        long deadline = System.nanoTime() + WAIT.toNanos();
        while (!TestKafka.committedOffsets(group).containsKey(partition(0))
            && System.nanoTime() < deadline) {
          Thread.sleep(100);
        }
      }
      slow.flush(); // every send made, written
    }

    assertThat(TestKafka.endOffset(new TopicPartition(topic + "-dlt", 0)))
        .as("dead letters of the one record without a key")
        .isEqualTo(1);
    assertThat(TestKafka.committedOffsets(group)).containsEntry(partition(0), 1L);
    assertThat(effects.all()).isEmpty();
  }

  /**
   * One publisher for the loops of two groups that consume the same topic: the first group's dead
   * letter of a record is answered after its loop stopped waiting (and stopped), and the second
   * group then dead-letters the same record for a reason of its own.
   */
  @Test
  void aPublisherSharedByTwoGroupsWritesTheSecondGroupsDeadLetterOfARecordTheFirstSentLate()
      throws Exception {
    TestKafka.createTopics(1, topic, topic + "-dlt");
    ProducerRecord<String, String> noKey =
        new ProducerRecord<>(topic, 0, RECORD_KEY, "charge without an order number");
    fixture.producer().send(noKey).get();
    String shipping = group + "-shipping";
    Map<String, Object> config = new HashMap<>();
    config.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, TestKafka.bootstrapServers());
    config.put(ProducerConfig.ACKS_CONFIG, "all");
    config.put(ProducerConfig.LINGER_MS_CONFIG, 3000);
    try (KafkaProducer<String, String> slow =
        new KafkaProducer<>(config, new StringSerializer(), new StringSerializer())) {
      DeadLetterHandler<String, String> shared =
          KafkaDeadLetterPublisher.builder(slow).sendTimeout(Duration.ofMillis(300)).build();

      try (RunningLoop billing =
          RunningLoop.start(
              loop(payments(executor, record -> effects.apply(record.value())), shared))) {
        await()
            .atMost(WAIT)
            .until(
                () ->
                    loopLog.list.stream()
                        .anyMatch(
                            e -> e.getFormattedMessage().startsWith("Could not dead-letter")));
      } // stopped while its dead letter lingers in the producer: the record is billing's again
      shipmentsGiveUpTheRecordToo(shipping, shared);
      slow.flush();
    }

    assertThat(TestKafka.readWritten(topic + "-dlt"))
        .extracting(r -> header(r, KafkaDeadLetterPublisher.EXCEPTION_MESSAGE_HEADER))
        .as("the record's dead letters")
        .anySatisfy(message -> assertThat(message).contains("'payment'"))
        .anySatisfy(message -> assertThat(message).contains("'shipment'"));
  }

  @Test
  void aPublisherSharedByTwoGroupsNamesInEachDeadLetterTheGroupThatGaveTheRecordUp()
      throws Exception {
    TestKafka.createTopics(1, topic, topic + "-dlt");
    fixture
        .producer()
        .send(new ProducerRecord<>(topic, 0, RECORD_KEY, "charge without an order number"))
        .get();
    String shipping = group + "-shipping";
    // Built for the first group's loop, as the class's example builds it, then handed to a second
    // group's loop as well: the loops tell the publisher their group.
    DeadLetterHandler<String, String> shared = deadLetters();

    try (RunningLoop billing =
        RunningLoop.start(
            loop(payments(executor, record -> effects.apply(record.value())), shared))) {
      awaitCommitted(Map.of(partition(0), 1L));
    }
    shipmentsGiveUpTheRecordToo(shipping, shared);

    List<ConsumerRecord<String, String>> dlt = TestKafka.readWritten(topic + "-dlt");
    assertThat(dlt)
        .extracting(r -> header(r, KafkaDeadLetterPublisher.EXCEPTION_MESSAGE_HEADER))
        .as("the record's dead letters")
        .anySatisfy(message -> assertThat(message).contains("'payment'"))
        .anySatisfy(message -> assertThat(message).contains("'shipment'"));
    assertThat(dlt)
        .extracting(r -> header(r, KafkaDeadLetterPublisher.ORIGINAL_GROUP_HEADER))
        .as("the group each dead letter names as the one that gave the record up")
        .containsExactlyInAnyOrder(group, shipping);
  }

  // --- a dead letter near the dead-letter topic's size limit ---

  @Test
  void aRecordTooLargeForItsDeadLetterWithTheExceptionMessageIsDeadLetteredWithoutIt()
      throws Exception {
    createSmallDeadLetterTopic();
    String payload = "x".repeat(1400);
    sendValue("B-1", payload);
    send("G-2");
    // The handler's exception echoes the payload, as a validation message often does: with the
    // message header the dead letter exceeds the topic's 2000 bytes, without it the record fits.
    RecordHandler<String, String> rejectsB =
        record -> {
          if (orderNo(record).startsWith("B-")) {
            throw new IllegalStateException("cannot charge " + record.value());
          }
          effects.apply(orderNo(record));
        };

    try (RunningLoop running =
        RunningLoop.start(loop(payments(executor, rejectsB), deadLetters()))) {
      awaitCommitted(Map.of(partition(0), 2L));
    }

    assertThat(effects.all()).containsOnly(Map.entry("G-2", 1));
    List<ConsumerRecord<String, String>> dlt = TestKafka.readWritten(topic + "-dlt");
    assertThat(dlt).hasSize(1);
    ConsumerRecord<String, String> deadLetter = dlt.get(0);
    assertThat(deadLetter.value()).isEqualTo(payload);
    assertThat(orderNo(deadLetter)).isEqualTo("B-1");
    assertThat(header(deadLetter, KafkaDeadLetterPublisher.EXCEPTION_CLASS_HEADER))
        .isEqualTo(IllegalStateException.class.getName());
    assertThat(header(deadLetter, KafkaDeadLetterPublisher.ORIGINAL_OFFSET_HEADER)).isEqualTo("0");
    assertThat(deadLetter.headers().lastHeader(KafkaDeadLetterPublisher.EXCEPTION_MESSAGE_HEADER))
        .as("the message that made it too large")
        .isNull();
  }

  @Test
  void aRecordTooLargeForTheDeadLetterTopicEvenWithoutTheMessageIsHeldSayingWhatToRaise()
      throws Exception {
    createSmallDeadLetterTopic();
    sendValue(null, "x".repeat(2500)); // no key: dead-lettered at once
    send("H-2");

    try (RunningLoop running =
        RunningLoop.start(
            loop(payments(executor, record -> effects.apply(orderNo(record))), deadLetters()))) {
      await()
          .atMost(WAIT)
          .untilAsserted(
              () ->
                  assertThat(loopLog.list)
                      .filteredOn(event -> event.getThrowableProxy() != null)
                      .extracting(event -> event.getThrowableProxy().getMessage())
                      .anySatisfy(
                          message ->
                              assertThat(message)
                                  .contains(
                                      "too large for " + topic + "-dlt", "max.message.bytes")));
      assertThat(running.isRunning()).as("the loop goes on, holding the record").isTrue();
    }

    assertThat(TestKafka.committedOffsets(group)).doesNotContainKey(partition(0));
    assertThat(effects.all()).doesNotContainKey("H-2");
  }

  // --- a key extractor that throws ---

  @Test
  void anErrorOfTheKeyExtractorDeadLettersItsRecordAtOnceAndTheLoopGoesOn() throws Exception {
    keyExtractorThrowsOnOneRecord(
        "",
        orderNo -> {
          throw new AssertionError("no parser for " + orderNo);
        },
        "java.lang.AssertionError: no parser for E-2");
  }

  @Test
  void aRuntimeExceptionOfTheKeyExtractorDeadLettersItsRecordAtOnceWithoutRetries()
      throws Exception {
    keyExtractorThrowsOnOneRecord(
        "R",
        orderNo -> {
          throw new IllegalStateException("no parser for " + orderNo);
        },
        "java.lang.IllegalStateException: no parser for RE-2");
  }

  /**
   * Sends the orders G-1, E-2 and G-3, each after {@code prefix} (the dedup table is the test
   * class's); the key extractor throws on E-2 what {@code failure} throws given its order number.
   * E-2 is dead-lettered at once, its handler never run, and the loop goes on.
   */
  private void keyExtractorThrowsOnOneRecord(String prefix, Consumer<String> failure, String cause)
      throws Exception {
    TestKafka.createTopics(1, topic, topic + "-dlt");
    send(prefix + "G-1");
    send(prefix + "E-2");
    send(prefix + "G-3");
    KeyExtractor<String, String> header = KeyExtractors.header(KEY_HEADER);
    KeyExtractor<String, String> failsOnE =
        record -> {
          Optional<String> key = header.extract(record);
          if (key.orElse("").startsWith(prefix + "E-")) {
            failure.accept(key.get());
          }
          return key;
        };
    IdempotentRecordHandler<String, String> handler =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType(BIZ_TYPE)
            .key(failsOnE)
            .groupId(group)
            .handler(record -> effects.apply(orderNo(record)))
            .build();

    try (RunningLoop running = RunningLoop.start(loop(handler, deadLetters()))) {
      awaitCommitted(Map.of(partition(0), 3L));
      assertThat(running.isRunning()).as("the loop goes on").isTrue();
    }

    assertThat(effects.all())
        .containsOnly(Map.entry(prefix + "G-1", 1), Map.entry(prefix + "G-3", 1));
    assertThat(loopLog.list)
        .extracting(ILoggingEvent::getFormattedMessage)
        .as("no attempt retried")
        .noneMatch(message -> message.contains("retrying"));
    List<ConsumerRecord<String, String>> dlt = TestKafka.readWritten(topic + "-dlt");
    assertThat(dlt).hasSize(1);
    assertThat(header(dlt.get(0), KEY_HEADER)).isEqualTo(prefix + "E-2");
    assertThat(header(dlt.get(0), KafkaDeadLetterPublisher.EXCEPTION_CLASS_HEADER))
        .isEqualTo(DedupKeyMalformedException.class.getName());
    assertThat(header(dlt.get(0), KafkaDeadLetterPublisher.EXCEPTION_MESSAGE_HEADER))
        .contains("key extractor", cause);
  }

  /**
   * A business key that is itself {@code sha256:} and 64 hex digits equals the stored form of some
   * key over 256 characters: were it stored as it is, whichever of the two came second would be
   * skipped as the other's duplicate, its action never applied and never dead-lettered.
   */
  @Test
  void aKeyOfTheFormALongKeyIsStoredInIsDeadLetteredNotSkippedAsThatKeysDuplicate()
      throws Exception {
    TestKafka.createTopics(1, topic, topic + "-dlt");
    String longKey = "L-" + "callback-".repeat(40);
    String hashedForm = DedupKey.of(BIZ_TYPE, longKey).bizKey();
    send(longKey);
    send(hashedForm);
    send("S-3");

    try (RunningLoop running =
        RunningLoop.start(
            loop(payments(executor, record -> effects.apply(orderNo(record))), deadLetters()))) {
      awaitCommitted(Map.of(partition(0), 3L));
    }

    assertThat(effects.all()).containsOnly(Map.entry(longKey, 1), Map.entry("S-3", 1));
    List<ConsumerRecord<String, String>> dlt = TestKafka.readFromStart(topic + "-dlt", 1, WAIT);
    assertThat(dlt).as("the record whose key has the hashed form, dead-lettered").hasSize(1);
    assertThat(header(dlt.get(0), KEY_HEADER)).isEqualTo(hashedForm);
    assertThat(header(dlt.get(0), KafkaDeadLetterPublisher.EXCEPTION_CLASS_HEADER))
        .isEqualTo(DedupKeyMalformedException.class.getName());
    assertThat(header(dlt.get(0), KafkaDeadLetterPublisher.EXCEPTION_MESSAGE_HEADER))
        .contains("sha256:", "over 256 characters");
  }

  // --- a handler that always fails ---

  @Test
  void attemptsCountedInTheTableSurviveARestartSoTheRecordIsDeadLetteredAfterOneMoreFailure()
      throws Exception {
    TestKafka.createTopics(1, topic, topic + "-dlt");
    send("R-1");
    AtomicInteger calls = new AtomicInteger();
    CountDownLatch secondCall = new CountDownLatch(1);
    CountDownLatch stopped = new CountDownLatch(1);
    RecordHandler<String, String> alwaysFails =
        record -> {
          int call = calls.incrementAndGet();
          if (call == 2) {
            secondCall.countDown();
            assertThat(stopped.await(20, TimeUnit.SECONDS)).isTrue();
          }
          throw new IllegalStateException("provider rejected card, call " + call);
        };

    DedupPollLoop<String, String> first = loop(payments(executor, alwaysFails), deadLetters());
    try (RunningLoop running = RunningLoop.start(first)) {
      assertThat(secondCall.await(20, TimeUnit.SECONDS)).isTrue();
      first.stop();
      stopped.countDown();
    }
    DedupRecord afterFirst = fixture.store().find(DedupKey.of(BIZ_TYPE, "R-1")).orElseThrow();
    assertThat(afterFirst.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(afterFirst.attempts()).isEqualTo(2);
    assertThat(TestKafka.committedOffsets(group)).doesNotContainKey(partition(0));

    // A restart: another executor and loop, with no memory of the first one's attempts.
    try (IdempotentExecutor restarted = IdempotentExecutor.builder(fixture.store()).build();
        RunningLoop second =
            RunningLoop.start(loop(payments(restarted, alwaysFails), deadLetters()))) {
      awaitCommitted(Map.of(partition(0), 1L));
    }

    assertThat(calls).hasValue(3);
    DedupRecord last = fixture.store().find(DedupKey.of(BIZ_TYPE, "R-1")).orElseThrow();
    assertThat(last.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(last.attempts()).isEqualTo(3);
    List<ConsumerRecord<String, String>> dlt = TestKafka.readFromStart(topic + "-dlt", 1, WAIT);
    assertThat(dlt).hasSize(1);
    assertThat(header(dlt.get(0), KafkaDeadLetterPublisher.EXCEPTION_MESSAGE_HEADER))
        .isEqualTo("provider rejected card, call 3");
    assertThat(loopLog.list)
        .anySatisfy(
            event ->
                assertThat(event.getFormattedMessage())
                    .contains(
                        "on attempt 3 of 3 (as counted by the dedup table",
                        "this loop's count is 1",
                        "dead-lettering it"));
    assertThat(loopLog.list)
        .filteredOn(
            event ->
                event.getLevel() == Level.WARN
                    && event.getFormattedMessage().startsWith("Handler failed"))
        .as("one line per retried attempt naming its cause, the stack trace at DEBUG only")
        .hasSize(2)
        .allSatisfy(
            event -> {
              assertThat(event.getFormattedMessage())
                  .contains("java.lang.IllegalStateException: provider rejected card, call");
              assertThat(event.getThrowableProxy()).isNull();
            });
  }

  @Test
  void aRecordWhoseAttemptsAreSpentIsNotRunAgainAfterARestartThatCameBeforeItsDeadLetter()
      throws Exception {
    TestKafka.createTopics(1, topic, topic + "-dlt");
    send("S-1");
    send("S-2");
    AtomicInteger calls = new AtomicInteger();
    RecordHandler<String, String> failsOnS1 =
        record -> {
          if (orderNo(record).equals("S-1")) {
            throw new IllegalStateException(
                "provider rejected card, call " + calls.incrementAndGet());
          }
          effects.apply(orderNo(record));
        };
    // The dead-letter topic is down until the loop is restarted.
    AtomicBoolean topicDown = new AtomicBoolean(true);
    AtomicInteger deadLetterTries = new AtomicInteger();
    DeadLetterHandler<String, String> publisher = deadLetters();
    DeadLetterHandler<String, String> downUntilRestart =
        (record, reason) -> {
          deadLetterTries.incrementAndGet();
          if (topicDown.get()) {
            throw new IllegalStateException("dead-letter topic unavailable");
          }
          publisher.deadLetter(record, reason);
        };

    try (RunningLoop first =
        RunningLoop.start(loop(payments(executor, failsOnS1), downUntilRestart))) {
      await().atMost(WAIT).until(() -> deadLetterTries.get() >= 2);
    }
    assertThat(calls).as("handler runs before the restart").hasValue(3);
    assertThat(TestKafka.committedOffsets(group)).doesNotContainKey(partition(0));

    // A restart: another executor and loop, which do not know that S-1's attempts are spent.
    topicDown.set(false);
    try (IdempotentExecutor restarted = IdempotentExecutor.builder(fixture.store()).build();
        RunningLoop second =
            RunningLoop.start(loop(payments(restarted, failsOnS1), downUntilRestart))) {
      awaitCommitted(Map.of(partition(0), 2L));
    }

    assertThat(calls).as("handler runs in all").hasValue(3);
    assertThat(effects.all()).containsOnly(Map.entry("S-2", 1));
    DedupRecord spent = fixture.store().find(DedupKey.of(BIZ_TYPE, "S-1")).orElseThrow();
    assertThat(spent.status()).as("the claim given back").isEqualTo(DedupStatus.FAILED);
    assertThat(spent.attempts()).isEqualTo(3);
    List<ConsumerRecord<String, String>> dlt = TestKafka.readWritten(topic + "-dlt");
    assertThat(dlt).as("dead letters").hasSize(1);
    assertThat(orderNo(dlt.get(0))).isEqualTo("S-1");
    assertThat(header(dlt.get(0), KafkaDeadLetterPublisher.EXCEPTION_CLASS_HEADER))
        .isEqualTo(DedupAttemptsExhaustedException.class.getName());
    assertThat(header(dlt.get(0), KafkaDeadLetterPublisher.EXCEPTION_MESSAGE_HEADER))
        .contains("Gave up after 3 failed attempts of at most 3", "provider rejected card, call 3");
  }

  @Test
  void whenTheAttemptsCannotBeReadTheLoopCountsItsOwnAndStillDeadLettersTheRecord()
      throws Exception {
    TestKafka.createTopics(1, topic, topic + "-dlt");
    send("U-1");
    send("U-2");
    AtomicInteger calls = new AtomicInteger();
    AtomicInteger countReads = new AtomicInteger();
    IdempotentRecordHandler<String, String> payments =
        payments(
            executor,
            record -> {
              if (orderNo(record).equals("U-1")) {
                calls.incrementAndGet();
                throw new IllegalStateException("provider rejected card");
              }
              effects.apply(orderNo(record));
            });
    RecordProcessor<String, String> countUnreadable =
        new RecordProcessor<>() {
          @Override
          public Outcome process(ConsumerRecord<String, String> record) {
            return payments.process(record);
          }

          @Override
          public OptionalInt attempts(ConsumerRecord<String, String> record) {
            countReads.incrementAndGet();
            throw new DedupStoreUnavailableException(
                "Connection refused (database down in this test)", null, null, null);
          }
        };

    try (RunningLoop running = RunningLoop.start(loop(countUnreadable, deadLetters()))) {
      awaitCommitted(Map.of(partition(0), 2L));
    }

    assertThat(calls).hasValue(3);
    assertThat(countReads).hasValue(3);
    assertThat(effects.all()).containsOnly(Map.entry("U-2", 1));
    assertThat(TestKafka.readFromStart(topic + "-dlt", 1, WAIT))
        .singleElement()
        .satisfies(deadLetter -> assertThat(orderNo(deadLetter)).isEqualTo("U-1"));
  }

  @Test
  void aFailureWhoseMessageHoldsANulCharacterIsRetriedAndDeadLetteredLikeAnyOther()
      throws Exception {
    TestKafka.createTopics(1, topic, topic + "-dlt");
    send("N-1");
    AtomicInteger calls = new AtomicInteger();

    try (RunningLoop running =
        RunningLoop.start(
            loop(
                payments(
                    executor,
                    record -> {
                      calls.incrementAndGet();
                      throw new IllegalStateException("card\u0000rejected");
                    }),
                deadLetters()))) {
      awaitCommitted(Map.of(partition(0), 1L));
    }

    assertThat(calls).hasValue(3);
    DedupRecord failed = fixture.store().find(DedupKey.of(BIZ_TYPE, "N-1")).orElseThrow();
    assertThat(failed.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(failed.attempts()).isEqualTo(3);
    assertThat(failed.lastError())
        .hasValueSatisfying(e -> assertThat(e).contains("card\\0rejected"));
    List<ConsumerRecord<String, String>> dlt = TestKafka.readFromStart(topic + "-dlt", 1, WAIT);
    assertThat(dlt).hasSize(1);
    assertThat(header(dlt.get(0), KafkaDeadLetterPublisher.EXCEPTION_MESSAGE_HEADER))
        .isEqualTo("card\u0000rejected");
  }

  // --- helpers ---

  private <V> IdempotentRecordHandler<String, V> payments(
      IdempotentExecutor engine, RecordHandler<String, V> work) {
    return IdempotentRecordHandler.<String, V>builder(engine)
        .bizType(BIZ_TYPE)
        .key(KeyExtractors.header(KEY_HEADER))
        .groupId(group)
        .handler(work)
        .build();
  }

  private DeadLetterHandler<String, String> deadLetters() {
    return KafkaDeadLetterPublisher.builder(fixture.producer()).groupId(group).build();
  }

  private DedupPollLoop<String, String> loop(
      RecordProcessor<String, String> processor, DeadLetterHandler<String, String> deadLetters) {
    return tuned(
        DedupPollLoop.builder(TestKafka.consumerConfig(group), List.of(topic), processor)
            .deadLetterHandler(deadLetters));
  }

  /** A loop over Integer values, whose deserializer rejects a value that is not four bytes. */
  private DedupPollLoop<String, Integer> amountLoop(DeadLetterHandler<String, Integer> dlt) {
    Map<String, Object> config = TestKafka.consumerConfig(group);
    config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, IntegerDeserializer.class);
    IdempotentRecordHandler<String, Integer> amounts =
        payments(executor, record -> effects.apply(orderNo(record)));
    return tuned(DedupPollLoop.builder(config, List.of(topic), amounts).deadLetterHandler(dlt));
  }

  private static <V> DedupPollLoop<String, V> tuned(DedupPollLoop.Builder<String, V> builder) {
    return LoopFixture.quick(builder).maxAttempts(3).build();
  }

  /** Makes the topic, and its dead-letter topic taking records of at most 2000 bytes. */
  private void createSmallDeadLetterTopic() {
    TestKafka.createTopics(1, topic);
    TestKafka.createTopic(topic + "-dlt", 1, Map.of("max.message.bytes", "2000"));
  }

  /** Sends {@code value} to partition 0 with the order number {@code orderNo}, or none if null. */
  private void sendValue(String orderNo, String value) throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(topic, 0, RECORD_KEY, value);
    if (orderNo != null) {
      record.headers().add(KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
    }
    fixture.producer().send(record).get();
  }

  private void send(String orderNo) throws Exception {
    ProducerRecord<String, String> record =
        new ProducerRecord<>(topic, 0, RECORD_KEY, "charge " + orderNo);
    record.headers().add(KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
    fixture.producer().send(record).get();
  }

  /**
   * Makes the topic (two partitions) and its dead-letter topic; sends to partition 0 the orders
   * {@code <held>-1}, {@code <held>-bad} (a value that is not an integer) and {@code <held>-2}, and
   * to partition 1 the order {@code <other>-1}.
   */
  private void sendAnUndeserializableValueBetweenGoodRecords(String held, String other)
      throws Exception {
    TestKafka.createTopics(2, topic);
    TestKafka.createTopics(1, topic + "-dlt");
    sendAmount(0, held + "-1", 100);
    sendRaw(0, held + "-bad", NOT_AN_INTEGER);
    sendAmount(0, held + "-2", 200);
    sendAmount(1, other + "-1", 300);
  }

  private void sendAmount(int partition, String orderNo, int amount) throws Exception {
    try (IntegerSerializer serializer = new IntegerSerializer()) {
      sendRaw(partition, orderNo, serializer.serialize(topic, amount));
    }
  }

  private void sendRaw(int partition, String orderNo, byte[] value) throws Exception {
    ProducerRecord<byte[], byte[]> record =
        new ProducerRecord<>(topic, partition, RECORD_KEY.getBytes(StandardCharsets.UTF_8), value);
    record.headers().add(KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
    record.headers().add("trace-id", ("trace-of-" + orderNo).getBytes(StandardCharsets.UTF_8));
    rawProducer.send(record).get();
  }

  private TopicPartition partition(int number) {
    return new TopicPartition(topic, number);
  }

  private void awaitCommitted(Map<TopicPartition, Long> offsets) {
    LoopFixture.awaitCommitted(group, offsets);
  }

  /**
   * Runs the loop of a second group, {@code shipping}, whose handler finds no order number either,
   * on {@code shared}, until that group has committed past the record it dead-letters.
   */
  private void shipmentsGiveUpTheRecordToo(
      String shipping, DeadLetterHandler<String, String> shared) throws Exception {
    IdempotentRecordHandler<String, String> shipments =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType("shipment")
            .key(KeyExtractors.header(KEY_HEADER))
            .groupId(shipping)
            .handler(record -> effects.apply(record.value()))
            .build();
    try (RunningLoop running =
        RunningLoop.start(
            tuned(
                DedupPollLoop.builder(TestKafka.consumerConfig(shipping), List.of(topic), shipments)
                    .deadLetterHandler(shared)))) {
      LoopFixture.awaitCommitted(shipping, Map.of(partition(0), 1L));
    }
  }
}
