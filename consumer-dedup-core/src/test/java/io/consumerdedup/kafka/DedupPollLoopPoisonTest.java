package io.consumerdedup.kafka;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStoreUnavailableException;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TestDatabase;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.OptionalInt;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.slf4j.LoggerFactory;

/**
 * Records that fail the same way on every delivery (a value the deserializer rejects, a handler
 * that always throws), through restarts of the loop: dead-lettered once retrying cannot help, never
 * passed without a dead letter, and not granted fresh attempts by a restart.
 */
class DedupPollLoopPoisonTest {
  private static final String BIZ_TYPE = "payment";
  private static final String KEY_HEADER = "order-no";
  private static final String RECORD_KEY = "customer-7";
  private static final Duration WAIT = Duration.ofSeconds(20);

  private static String schema;
  private static HikariDataSource dataSource;
  private static JdbcDedupStore store;
  private static KafkaProducer<String, String> producer;

  private final Effects effects = new Effects();
  private IdempotentExecutor executor;
  private String topic;
  private String group;
  private ListAppender<ILoggingEvent> loopLog;

  @BeforeAll
  static void setUpClass() {
    schema = TestDatabase.newSchema("loop_poison");
    dataSource = TestDatabase.dataSource(schema, 4);
    store = JdbcDedupStore.builder(dataSource).build();
    producer = TestKafka.producer();
  }

  @AfterAll
  static void tearDownClass() {
    producer.close();
    dataSource.close();
    TestDatabase.dropSchema(schema);
  }

  @BeforeEach
  void setUp() {
    String id = UUID.randomUUID().toString().substring(0, 8);
    topic = "payments-" + id;
    group = "billing-" + id;
    executor = IdempotentExecutor.builder(store).build();
    loopLog = new ListAppender<>();
    loopLog.start();
    ((Logger) LoggerFactory.getLogger(DedupPollLoop.class)).addAppender(loopLog);
  }

  @AfterEach
  void tearDown() {
    ((Logger) LoggerFactory.getLogger(DedupPollLoop.class)).detachAppender(loopLog);
    executor.close();
  }

  // --- a handler that always fails ---

  @Test
  void attemptsCountedInTheTableSurviveARestartSoTheRecordIsDeadLetteredAfterOneMoreFailure()
      throws Exception {
    TestKafka.createTopics(1, topic, topic + ".DLT");
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
    DedupRecord afterFirst = store.find(DedupKey.of(BIZ_TYPE, "R-1")).orElseThrow();
    assertThat(afterFirst.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(afterFirst.attempts()).isEqualTo(2);
    assertThat(TestKafka.committedOffsets(group)).doesNotContainKey(partition(0));

    // A restart: another executor and loop, with no memory of the first one's attempts.
    try (IdempotentExecutor restarted = IdempotentExecutor.builder(store).build();
        RunningLoop second =
            RunningLoop.start(loop(payments(restarted, alwaysFails), deadLetters()))) {
      awaitCommitted(Map.of(partition(0), 1L));
    }

    assertThat(calls).hasValue(3);
    DedupRecord last = store.find(DedupKey.of(BIZ_TYPE, "R-1")).orElseThrow();
    assertThat(last.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(last.attempts()).isEqualTo(3);
    List<ConsumerRecord<String, String>> dlt = TestKafka.readFromStart(topic + ".DLT", 1, WAIT);
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
  }

  @Test
  void whenTheAttemptsCannotBeReadTheLoopCountsItsOwnAndStillDeadLettersTheRecord()
      throws Exception {
    TestKafka.createTopics(1, topic, topic + ".DLT");
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
    assertThat(TestKafka.readFromStart(topic + ".DLT", 1, WAIT))
        .singleElement()
        .satisfies(deadLetter -> assertThat(orderNo(deadLetter)).isEqualTo("U-1"));
  }

  @Test
  void aFailureWhoseMessageHoldsANulCharacterIsRetriedAndDeadLetteredLikeAnyOther()
      throws Exception {
    TestKafka.createTopics(1, topic, topic + ".DLT");
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
    DedupRecord failed = store.find(DedupKey.of(BIZ_TYPE, "N-1")).orElseThrow();
    assertThat(failed.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(failed.attempts()).isEqualTo(3);
    assertThat(failed.lastError())
        .hasValueSatisfying(e -> assertThat(e).contains("card\\0rejected"));
    List<ConsumerRecord<String, String>> dlt = TestKafka.readFromStart(topic + ".DLT", 1, WAIT);
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
    return KafkaDeadLetterPublisher.builder(producer).groupId(group).build();
  }

  private DedupPollLoop<String, String> loop(
      RecordProcessor<String, String> processor, DeadLetterHandler<String, String> deadLetters) {
    return tuned(
        DedupPollLoop.builder(TestKafka.consumerConfig(group), List.of(topic), processor)
            .deadLetterHandler(deadLetters));
  }

  private static <V> DedupPollLoop<String, V> tuned(DedupPollLoop.Builder<String, V> builder) {
    return builder
        .maxAttempts(3)
        .retryBackOff(Duration.ofMillis(50))
        .holdBackOff(Duration.ofMillis(100), Duration.ofMillis(200))
        .pollTimeout(Duration.ofMillis(200))
        .build();
  }

  private void send(String orderNo) throws Exception {
    ProducerRecord<String, String> record =
        new ProducerRecord<>(topic, 0, RECORD_KEY, "charge " + orderNo);
    record.headers().add(KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
    producer.send(record).get();
  }

  private TopicPartition partition(int number) {
    return new TopicPartition(topic, number);
  }

  private void awaitCommitted(Map<TopicPartition, Long> offsets) {
    await()
        .atMost(WAIT)
        .untilAsserted(
            () -> assertThat(TestKafka.committedOffsets(group)).containsAllEntriesOf(offsets));
  }

  private static String header(ConsumerRecord<?, ?> record, String name) {
    Header header = record.headers().lastHeader(name);
    assertThat(header).as("header " + name).isNotNull();
    return new String(header.value(), StandardCharsets.UTF_8);
  }

  private static String orderNo(ConsumerRecord<?, ?> record) {
    return header(record, KEY_HEADER);
  }
}
