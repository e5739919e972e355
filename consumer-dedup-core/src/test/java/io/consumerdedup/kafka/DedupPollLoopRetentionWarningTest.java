package io.consumerdedup.kafka;

import static io.consumerdedup.kafka.LoopFixture.BIZ_TYPE;
import static io.consumerdedup.kafka.LoopFixture.KEY_HEADER;
import static io.consumerdedup.kafka.LoopFixture.WAIT;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.slf4j.LoggerFactory;

/**
 * An executor whose successRetention is shorter than the time a record can still be read (the
 * topic's retention, a replay, a new consumer group reading from the start): once a key is purged,
 * its record is applied again. The library cannot prevent it, but the user must hear of it.
 */
class DedupPollLoopRetentionWarningTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("loop_retention");

  private static final Duration RETENTION = Duration.ofSeconds(1);
  private static final Duration HOURS = Duration.ofHours(2);

  private final ListAppender<ILoggingEvent> logged = new ListAppender<>();
  private final Logger loopLog = (Logger) LoggerFactory.getLogger(DedupPollLoop.class);
  private IdempotentExecutor executor;

  @BeforeEach
  void watchTheLog() {
    logged.start();
    loopLog.addAppender(logged);
  }

  @AfterEach
  void tearDown() {
    loopLog.detachAppender(logged);
    if (executor != null) {
      executor.close();
    }
  }

  /**
   * A record is handled, its key purged once successRetention (1 s) is over, and the topic read
   * again by a new consumer group: the record was applied a second time, and nothing was logged.
   */
  @Test
  void aRecordAppliedAfterItsKeyCouldHaveBeenPurgedIsNamedInAWarning() throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    ProducerRecord<String, String> sent =
        new ProducerRecord<>(fixture.topic(), 0, "ORD-1", "charge ORD-1");
    sent.headers().add(KEY_HEADER, "ORD-1".getBytes(StandardCharsets.UTF_8));
    fixture.producer().send(sent).get();
    executor = IdempotentExecutor.builder(fixture.store()).successRetention(RETENTION).build();
    List<String> applied = new CopyOnWriteArrayList<>();

    try (RunningLoop first = RunningLoop.start(loop(fixture.group(), applied))) {
      await().atMost(WAIT).untilAsserted(() -> assertThat(applied).hasSize(1));
    }
    Thread.sleep(RETENTION.toMillis() + 500);
    // Keys of the other tests of the class, applied again, may be purged along.
    assertThat(fixture.store().purge(100)).as("keys purged").isPositive();
    try (RunningLoop replay = RunningLoop.start(loop(fixture.group() + "-replay", applied))) {
      await()
          .atMost(WAIT)
          .untilAsserted(() -> assertThat(applied).as("applied again after the purge").hasSize(2));
    }

    assertThat(logged.list)
        .filteredOn(event -> event.getLevel() == Level.WARN)
        .extracting(ILoggingEvent::getFormattedMessage)
        .as("warnings of the poll loop")
        .anySatisfy(
            warning ->
                assertThat(warning)
                    .contains(fixture.topic() + "-0@0")
                    .contains("successRetention (PT1S)")
                    .contains("applied again"));
  }

  /**
   * A producer whose clock is a month behind (or that sets an event time) writes a record while the
   * loop runs: its CreateTime said it was a month old, and the loop warned that its key may have
   * been purged, though the record had just been written.
   */
  @Test
  void aRecordWrittenWhileTheLoopRunsIsNotWarnedOfWhateverItsCreateTimeSays() throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    executor = IdempotentExecutor.builder(fixture.store()).successRetention(HOURS).build();
    List<String> applied = new CopyOnWriteArrayList<>();
    try (RunningLoop loop = RunningLoop.start(loop(fixture.group(), applied))) {
      send("ORD-1", System.currentTimeMillis()); // the loop sees the partition's end
      await().atMost(WAIT).untilAsserted(() -> assertThat(applied).hasSize(1));
      send("ORD-2", System.currentTimeMillis() - Duration.ofDays(30).toMillis());
      await().atMost(WAIT).untilAsserted(() -> assertThat(applied).hasSize(2));
    }

    assertThat(logged.list)
        .filteredOn(event -> event.getLevel() == Level.WARN)
        .extracting(ILoggingEvent::getFormattedMessage)
        .as("warnings of the poll loop")
        .noneMatch(warning -> warning.contains("successRetention"));
  }

  /**
   * A producer whose clock is half an hour ahead: its record's CreateTime lies in the future, so
   * its age was negative and never longer than successRetention. Read again after its key was
   * purged, it was applied a second time and nothing was logged.
   */
  @Test
  void aRecordWhoseCreateTimeLiesInTheFutureIsNamedInAWarningWhenItsAgeCannotBeTold()
      throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    send("ORD-1", System.currentTimeMillis() + Duration.ofMinutes(30).toMillis());
    executor = IdempotentExecutor.builder(fixture.store()).successRetention(RETENTION).build();
    List<String> applied = new CopyOnWriteArrayList<>();

    try (RunningLoop first = RunningLoop.start(loop(fixture.group(), applied))) {
      await().atMost(WAIT).untilAsserted(() -> assertThat(applied).hasSize(1));
    }
    Thread.sleep(RETENTION.toMillis() + 500);
    // Keys of the other tests of the class, applied again, may be purged along.
    assertThat(fixture.store().purge(100)).as("keys purged").isPositive();
    try (RunningLoop replay = RunningLoop.start(loop(fixture.group() + "-replay", applied))) {
      await()
          .atMost(WAIT)
          .untilAsserted(() -> assertThat(applied).as("applied again after the purge").hasSize(2));
    }

    assertThat(logged.list)
        .filteredOn(event -> event.getLevel() == Level.WARN)
        .extracting(ILoggingEvent::getFormattedMessage)
        .as("warnings of the poll loop")
        .anySatisfy(
            warning ->
                assertThat(warning)
                    .contains(fixture.topic() + "-0@0")
                    .contains("in the future")
                    .contains("successRetention (PT1S)"));
  }

  /**
   * A topic stamped by the broker (LogAppendTime): the record's CreateTime, a month old, is
   * replaced by the time the broker wrote it, which the loop can trust; no warning.
   */
  @Test
  void aTopicStampedByTheBrokerIsTrustedWhateverTheProducersClock() throws Exception {
    TestKafka.createTopic(fixture.topic(), 1, Map.of("message.timestamp.type", "LogAppendTime"));
    send("ORD-1", System.currentTimeMillis() - Duration.ofDays(30).toMillis());
    executor = IdempotentExecutor.builder(fixture.store()).successRetention(HOURS).build();
    List<String> applied = new CopyOnWriteArrayList<>();
    try (RunningLoop loop = RunningLoop.start(loop(fixture.group(), applied))) {
      await().atMost(WAIT).untilAsserted(() -> assertThat(applied).hasSize(1));
    }

    assertThat(logged.list)
        .filteredOn(event -> event.getLevel() == Level.WARN)
        .extracting(ILoggingEvent::getFormattedMessage)
        .as("warnings of the poll loop")
        .noneMatch(warning -> warning.contains("successRetention"));
  }

  /**
   * The loop notes each partition's end from the lag the consumer knows; asked of a partition whose
   * end it did not know, the consumer asked the broker and logged it at INFO. A loop at steady
   * state must not log that at each poll, nor on each sighting of a partition.
   */
  @Test
  void aLoopAtSteadyStateDoesNotAskTheBrokerForPartitionEndsAtEachPoll() throws Exception {
    TestKafka.createTopics(3, fixture.topic());
    executor = IdempotentExecutor.builder(fixture.store()).successRetention(RETENTION).build();
    List<String> applied = new CopyOnWriteArrayList<>();
    Logger kafkaLog = (Logger) LoggerFactory.getLogger("org.apache.kafka.clients.consumer");
    Level level = kafkaLog.getLevel();
    ListAppender<ILoggingEvent> kafkaLogged = new ListAppender<>();
    kafkaLogged.start();
    kafkaLog.addAppender(kafkaLogged);
    kafkaLog.setLevel(Level.INFO);
    try (RunningLoop loop = RunningLoop.start(loop(fixture.group(), applied))) {
      for (int i = 0; i < 25; i++) {
        send("ORD-" + i, System.currentTimeMillis());
        Thread.sleep(200); // past half of successRetention every few records: sightings renewed
      }
      await().atMost(WAIT).untilAsserted(() -> assertThat(applied).hasSize(25));
    } finally {
      kafkaLog.setLevel(level);
      kafkaLog.detachAppender(kafkaLogged);
    }

    assertThat(kafkaLogged.list)
        .extracting(ILoggingEvent::getFormattedMessage)
        .filteredOn(message -> message.contains("Requesting the log end offset"))
        .as("the consumer's requests for a partition's end, over 5 s of polls of 3 partitions")
        .hasSizeLessThanOrEqualTo(3);
  }

  /** Sends a record whose order number is unique to this test: keys outlive a test's topic. */
  private void send(String name, long createTime) throws Exception {
    String orderNo = fixture.topic() + "-" + name;
    ProducerRecord<String, String> sent =
        new ProducerRecord<>(fixture.topic(), 0, createTime, orderNo, "charge " + orderNo);
    sent.headers().add(KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
    fixture.producer().send(sent).get();
  }

  private DedupPollLoop<String, String> loop(String group, List<String> applied) {
    return LoopFixture.quick(
            DedupPollLoop.builder(
                TestKafka.consumerConfig(group),
                List.of(fixture.topic()),
                IdempotentRecordHandler.<String, String>builder(executor)
                    .bizType(BIZ_TYPE)
                    .key(KeyExtractors.header(KEY_HEADER))
                    .handler(record -> applied.add(record.key()))
                    .build()))
        .deadLetterHandler((record, reason) -> {})
        .build();
  }
}
