package io.consumerdedup.kafka;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.Outcome;
import io.consumerdedup.testing.TestKafka;
import io.consumerdedup.testing.TestShareGroups;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
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
 * A record the share loop's deserializer rejects whose dead letter fails at once for a couple of
 * seconds (a dead-letter topic briefly away), against the real broker's share groups. Its lock
 * cannot be renewed; released at the first failure, it came back at once and failed again, five
 * deliveries in a fraction of a second, and the broker archived it without its dead letter.
 */
class DedupShareLoopUndeserializableRetryTest {
  @RegisterExtension
  static final LoopFixture fixture = new LoopFixture("share_undeserializable_retry");

  private static final Duration WAIT = Duration.ofSeconds(30);
  private static final Duration LOCK = Duration.ofSeconds(10);

  /** How long the dead-letter handler refuses, from its first refusal. */
  private static final Duration AWAY = Duration.ofMillis(2_500);

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
    TestShareGroups.configure(group, LOCK, Duration.ofSeconds(1));
  }

  @AfterEach
  void tearDown() {
    loops.forEach(DedupShareLoop::close);
    threads.shutdownNow();
    typed.close();
    raw.close();
  }

  /**
   * The user sees the record in the dead-letter topic once, with its bytes, the record after it
   * handled, and nothing left in the queue.
   */
  @Test
  void anUndeserializableRecordWhoseDeadLetterFailsBrieflyIsDeadLetteredNotArchived()
      throws Exception {
    DeadLetterHandler<String, Integer> publisher =
        KafkaDeadLetterPublisher.builder(typed).rawProducer(raw).groupId(group).build();
    AtomicLong firstRefusal = new AtomicLong();
    AtomicInteger refused = new AtomicInteger();
    DeadLetterHandler<String, Integer> awayBriefly =
        new DeadLetterHandler<>() {
          @Override
          public void deadLetter(ConsumerRecord<String, Integer> record, Exception reason) {
            publisher.deadLetter(record, reason);
          }

          @Override
          public void deadLetterUndeserializable(
              ConsumerRecord<byte[], byte[]> record, Exception reason) {
            firstRefusal.compareAndSet(0, System.nanoTime());
            if (System.nanoTime() - firstRefusal.get() < AWAY.toNanos()) {
              refused.incrementAndGet();
              throw new IllegalStateException("injected: dead-letter topic unavailable");
            }
            publisher.deadLetterUndeserializable(record, reason);
          }
        };
    raw.send(new ProducerRecord<>(topic, new byte[] {1, 2, 3})).get();
    raw.send(new ProducerRecord<>(topic, new IntegerSerializer().serialize(topic, 2))).get();
    threads.submit(loop(awayBriefly));

    assertThat(TestKafka.readRawFromStart(topic + "-dlt", 1, WAIT))
        .as("dead letters")
        .extracting(ConsumerRecord::value)
        .containsExactly(new byte[] {1, 2, 3});
    await().atMost(WAIT).until(() -> handled.contains(2));
    assertThat(refused.get()).as("dead letters refused").isGreaterThan(1);
    loops.forEach(DedupShareLoop::close);
    assertThat(TestShareGroups.remaining(group, topic, Duration.ofSeconds(3))).isEmpty();
    assertThat(TestKafka.readRawWritten(topic + "-dlt")).as("dead letters").hasSize(1);
  }

  private DedupShareLoop<String, Integer> loop(DeadLetterHandler<String, Integer> deadLetters) {
    Map<String, Object> config = TestShareGroups.consumerConfig(group);
    config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, IntegerDeserializer.class);
    DedupShareLoop<String, Integer> loop =
        DedupShareLoop.<String, Integer>builder(
                config,
                List.of(topic),
                record -> {
                  handled.add(record.value());
                  return Outcome.PROCESSED;
                })
            .deadLetterHandler(deadLetters)
            .build(KafkaShareConsumer::new);
    loops.add(loop);
    return loop;
  }
}
