package io.consumerdedup.kafka;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupKeyMalformedException;
import io.consumerdedup.core.DedupKeyMissingException;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupAdmin;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Records the loop cannot handle (no key, an unreadable key, a failing handler): retried when that
 * can help, otherwise sent to {@code <topic>-dlt} with the reason, and the loop moves on.
 */
class DedupPollLoopFailureTest {
  private static final String BIZ_TYPE = "payment";
  private static final String KEY_HEADER = "order-no";
  private static final Duration WAIT = Duration.ofSeconds(20);

  @RegisterExtension static final LoopFixture fixture = new LoopFixture("loop_failure");

  private final Effects effects = new Effects();
  private final List<ConsumerRecord<String, String>> deadLettered = new CopyOnWriteArrayList<>();
  private IdempotentExecutor executor;
  private String topic;
  private String group;

  @BeforeEach
  void setUp() {
    topic = fixture.topic();
    group = fixture.group();
    TestKafka.createTopics(1, topic, topic + "-dlt");
    executor = IdempotentExecutor.builder(fixture.store()).build();
  }

  @AfterEach
  void tearDown() {
    executor.close();
  }

  private IdempotentRecordHandler<String, String> payments(RecordHandler<String, String> work) {
    return IdempotentRecordHandler.<String, String>builder(executor)
        .bizType(BIZ_TYPE)
        .key(KeyExtractors.header(KEY_HEADER))
        .groupId(group)
        .handler(work)
        .build();
  }

  private DedupPollLoop<String, String> loop(
      String fromTopic, String inGroup, IdempotentRecordHandler<String, String> handler) {
    DeadLetterHandler<String, String> publisher =
        KafkaDeadLetterPublisher.builder(fixture.producer()).groupId(inGroup).build();
    return DedupPollLoop.builder(TestKafka.consumerConfig(inGroup), List.of(fromTopic), handler)
        .deadLetterHandler(
            (record, reason) -> {
              publisher.deadLetter(record, reason);
              deadLettered.add(record);
            })
        .maxAttempts(3)
        .retryBackOff(Duration.ofMillis(50))
        .holdBackOff(Duration.ofMillis(100), Duration.ofMillis(200))
        .pollTimeout(Duration.ofMillis(200))
        .build();
  }

  private void send(@Nullable byte[] orderNo, String value) throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(topic, 0, "customer-7", value);
    record.headers().add("trace-id", ("trace-of-" + value).getBytes(StandardCharsets.UTF_8));
    if (orderNo != null) {
      record.headers().add(KEY_HEADER, orderNo);
    }
    fixture.producer().send(record).get();
  }

  private void send(String orderNo) throws Exception {
    send(orderNo.getBytes(StandardCharsets.UTF_8), "charge " + orderNo);
  }

  private void awaitCommitted(String inGroup, String ofTopic, long offset) {
    await()
        .atMost(WAIT)
        .untilAsserted(
            () ->
                assertThat(TestKafka.committedOffsets(inGroup))
                    .containsEntry(new TopicPartition(ofTopic, 0), offset));
  }

  private static String header(ConsumerRecord<?, ?> record, String name) {
    Header header = record.headers().lastHeader(name);
    assertThat(header).as("header " + name).isNotNull();
    return new String(header.value(), StandardCharsets.UTF_8);
  }

  private static String orderNo(ConsumerRecord<String, String> record) {
    return header(record, KEY_HEADER);
  }

  @Test
  void aRecordWithoutTheKeyHeaderGoesToTheDeadLetterTopicWithTheReasonAndTheLoopMovesOn()
      throws Exception {
    send("F-1");
    send(null, "charge without order number");
    send("F-2");

    try (RunningLoop running =
        RunningLoop.start(loop(topic, group, payments(r -> effects.apply(orderNo(r)))))) {
      awaitCommitted(group, topic, 3);
    }

    assertThat(effects.all()).containsOnly(Map.entry("F-1", 1), Map.entry("F-2", 1));
    List<ConsumerRecord<String, String>> dlt = TestKafka.readFromStart(topic + "-dlt", 1, WAIT);
    assertThat(dlt).hasSize(1);
    ConsumerRecord<String, String> deadLetter = dlt.get(0);
    assertThat(deadLetter.key()).isEqualTo("customer-7");
    assertThat(deadLetter.value()).isEqualTo("charge without order number");
    assertThat(header(deadLetter, "trace-id")).isEqualTo("trace-of-charge without order number");
    assertThat(header(deadLetter, KafkaDeadLetterPublisher.EXCEPTION_CLASS_HEADER))
        .isEqualTo(DedupKeyMissingException.class.getName());
    assertThat(header(deadLetter, KafkaDeadLetterPublisher.EXCEPTION_MESSAGE_HEADER))
        .contains("no business key", "'" + BIZ_TYPE + "'", topic + "-0@1", "group " + group);
    assertThat(header(deadLetter, KafkaDeadLetterPublisher.ORIGINAL_TOPIC_HEADER)).isEqualTo(topic);
    assertThat(header(deadLetter, KafkaDeadLetterPublisher.ORIGINAL_PARTITION_HEADER))
        .isEqualTo("0");
    assertThat(header(deadLetter, KafkaDeadLetterPublisher.ORIGINAL_OFFSET_HEADER)).isEqualTo("1");
    assertThat(header(deadLetter, KafkaDeadLetterPublisher.ORIGINAL_GROUP_HEADER)).isEqualTo(group);
  }

  @Test
  void aKeyHeaderThatIsNotUtf8IsDeadLetteredAsMalformedNamingTheHeaderAndTheRecord()
      throws Exception {
    send(new byte[] {(byte) 0xC3, (byte) 0x28}, "charge with a broken order number");
    send("G-1");

    try (RunningLoop running =
        RunningLoop.start(loop(topic, group, payments(r -> effects.apply(orderNo(r)))))) {
      awaitCommitted(group, topic, 2);
    }

    assertThat(effects.all()).containsOnly(Map.entry("G-1", 1));
    List<ConsumerRecord<String, String>> dlt = TestKafka.readFromStart(topic + "-dlt", 1, WAIT);
    assertThat(dlt).hasSize(1);
    assertThat(dlt.get(0).value()).isEqualTo("charge with a broken order number");
    assertThat(header(dlt.get(0), KafkaDeadLetterPublisher.EXCEPTION_CLASS_HEADER))
        .isEqualTo(DedupKeyMalformedException.class.getName());
    assertThat(header(dlt.get(0), KafkaDeadLetterPublisher.EXCEPTION_MESSAGE_HEADER))
        .contains("header '" + KEY_HEADER + "'", "not valid UTF-8", topic + "-0@0");
  }

  @Test
  void aHandlerThatFailsTwiceThenSucceedsAppliesTheOrderOnceOnTheThirdAttempt() throws Exception {
    AtomicInteger calls = new AtomicInteger();
    send("H-1");

    try (RunningLoop running =
        RunningLoop.start(
            loop(
                topic,
                group,
                payments(
                    record -> {
                      if (calls.incrementAndGet() <= 2) {
                        throw new IllegalStateException("provider unavailable");
                      }
                      effects.apply(orderNo(record));
                    })))) {
      awaitCommitted(group, topic, 1);
    }

    assertThat(calls).hasValue(3);
    assertThat(effects.all()).containsOnly(Map.entry("H-1", 1));
    assertThat(deadLettered).isEmpty();
    DedupRecord record = fixture.store().find(DedupKey.of(BIZ_TYPE, "H-1")).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(record.attempts()).isEqualTo(3);
  }

  @Test
  void
      aHandlerThatAlwaysFailsIsDeadLetteredAfterThreeAttemptsAndAReplayAppliesItOnceItsKeyIsForgotten()
          throws Exception {
    AtomicBoolean providerRejects = new AtomicBoolean(true);
    AtomicInteger poisonCalls = new AtomicInteger();
    IdempotentRecordHandler<String, String> handler =
        payments(
            record -> {
              String orderNo = orderNo(record);
              if (orderNo.equals("P-1")) {
                poisonCalls.incrementAndGet();
                if (providerRejects.get()) {
                  throw new IllegalStateException("provider rejected card");
                }
              }
              effects.apply(orderNo);
            });
    send("P-1");
    send("P-2");

    try (RunningLoop running = RunningLoop.start(loop(topic, group, handler))) {
      awaitCommitted(group, topic, 2);
    }

    assertThat(poisonCalls).hasValue(3);
    assertThat(effects.all()).containsOnly(Map.entry("P-2", 1));
    DedupRecord failed = fixture.store().find(DedupKey.of(BIZ_TYPE, "P-1")).orElseThrow();
    assertThat(failed.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(failed.attempts()).isEqualTo(3);
    assertThat(failed.lastError())
        .hasValueSatisfying(e -> assertThat(e).contains("provider rejected card"));
    List<ConsumerRecord<String, String>> dlt = TestKafka.readFromStart(topic + "-dlt", 1, WAIT);
    assertThat(dlt).hasSize(1);
    assertThat(orderNo(dlt.get(0))).isEqualTo("P-1");
    assertThat(header(dlt.get(0), KafkaDeadLetterPublisher.EXCEPTION_CLASS_HEADER))
        .isEqualTo(IllegalStateException.class.getName());
    assertThat(header(dlt.get(0), KafkaDeadLetterPublisher.EXCEPTION_MESSAGE_HEADER))
        .isEqualTo("provider rejected card");

    // The provider is fixed; an operator replays the dead-letter topic. The key's attempts are
    // spent: replayed as it is, the record goes straight back to a dead-letter topic, unrun.
    providerRejects.set(false);
    TestKafka.createTopics(1, topic + "-dlt-dlt");
    String replayGroup = group + "-replay";
    try (RunningLoop replay = RunningLoop.start(loop(topic + "-dlt", replayGroup, handler))) {
      awaitCommitted(replayGroup, topic + "-dlt", 1);
    }
    assertThat(poisonCalls).hasValue(3);
    assertThat(TestKafka.readFromStart(topic + "-dlt-dlt", 1, WAIT))
        .singleElement()
        .satisfies(
            again ->
                assertThat(header(again, KafkaDeadLetterPublisher.EXCEPTION_MESSAGE_HEADER))
                    .contains("Gave up after 3 failed attempts of at most 3"));

    // Once the operator has forgotten the key, the replay applies it.
    assertThat(JdbcDedupAdmin.of(fixture.store()).forget(DedupKey.of(BIZ_TYPE, "P-1"), "operator"))
        .satisfies(change -> assertThat(change.applied()).isTrue());
    String secondReplay = group + "-replay-2";
    try (RunningLoop replay = RunningLoop.start(loop(topic + "-dlt", secondReplay, handler))) {
      awaitCommitted(secondReplay, topic + "-dlt", 1);
    }

    assertThat(effects.all()).containsOnly(Map.entry("P-1", 1), Map.entry("P-2", 1));
    DedupRecord replayed = fixture.store().find(DedupKey.of(BIZ_TYPE, "P-1")).orElseThrow();
    assertThat(replayed.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(replayed.attempts()).isEqualTo(1);
  }
}
