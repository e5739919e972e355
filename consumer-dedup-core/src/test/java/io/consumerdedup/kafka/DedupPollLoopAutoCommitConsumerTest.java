package io.consumerdedup.kafka;

import static io.consumerdedup.kafka.LoopFixture.BIZ_TYPE;
import static io.consumerdedup.kafka.LoopFixture.KEY_HEADER;
import static io.consumerdedup.kafka.LoopFixture.WAIT;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerInterceptor;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * A consumer the application made itself and handed to the loop, with {@code enable.auto.commit}
 * left at kafka-clients' default, true: the loop cannot read that setting, so the consumer's own
 * commits (at each poll and as it closes) must find nothing past the records that are done.
 */
class DedupPollLoopAutoCommitConsumerTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("loop_autocommit");

  private static final int RECORDS = 5;

  private final ExecutorService thread = Executors.newSingleThreadExecutor();
  private IdempotentExecutor executor;

  @AfterEach
  void tearDown() throws InterruptedException {
    thread.shutdownNow();
    thread.awaitTermination(30, TimeUnit.SECONDS);
    if (executor != null) {
      executor.close();
    }
  }

  /**
   * The handler closes the loop on the second record of a poll of five. The loop left the other
   * three unhandled and committed only what was done, but the consumer's position stayed past the
   * whole poll, and the consumer committed that position as it closed: the three records never came
   * again.
   */
  @Test
  void recordsLeftUnhandledByAStopAreNotCommittedByTheConsumersAutoCommit() throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    for (int i = 0; i < RECORDS; i++) {
      String orderNo = "ORD-" + i;
      ProducerRecord<String, String> record =
          new ProducerRecord<>(fixture.topic(), 0, orderNo, "charge " + orderNo);
      record.headers().add(KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
      fixture.producer().send(record).get();
    }
    executor = IdempotentExecutor.builder(fixture.store()).build();
    Set<String> applied = ConcurrentHashMap.newKeySet();
    AtomicReference<DedupPollLoop<String, String>> first = new AtomicReference<>();
    DedupPollLoop<String, String> stoppingLoop =
        loop(
            record -> {
              applied.add(record.key());
              if (applied.size() == 2) {
                first.get().close(); // from the handler: asks the loop to stop
              }
            });
    first.set(stoppingLoop);
    Future<?> run = thread.submit(stoppingLoop);
    run.get(WAIT.toSeconds(), TimeUnit.SECONDS);
    assertThat(applied).as("records handled by the first loop").hasSize(2);
    assertThat(PollSizes.largest.get())
        .as("records of the first loop's poll, some left unhandled as it stopped")
        .isEqualTo(RECORDS);

    try (RunningLoop next = RunningLoop.start(loop(record -> applied.add(record.key())))) {
      await()
          .atMost(WAIT)
          .untilAsserted(
              () ->
                  assertThat(applied)
                      .as("records handled, by the first loop and the next one")
                      .hasSize(RECORDS));
    }
    assertThat(TestKafka.committedOffsets(fixture.group()))
        .containsEntry(new TopicPartition(fixture.topic(), 0), (long) RECORDS);
  }

  /**
   * The loop stops on the first record of a poll over three partitions, and the consumer refuses
   * the seek back of one of them (a partition revoked meanwhile is refused so). The seeks back of
   * the other two partitions were never made: the consumer committed its position past their
   * records as it closed, and they never came again.
   */
  @Test
  void aSeekBackRefusedForOnePartitionStillSeeksTheOthersBack() throws Exception {
    int partitions = 3;
    TestKafka.createTopics(partitions, fixture.topic());
    Map<Integer, Set<String>> sent = new ConcurrentHashMap<>();
    for (int p = 0; p < partitions; p++) {
      for (int i = 0; i < 3; i++) {
        String orderNo = "ORD-" + p + "-" + i;
        ProducerRecord<String, String> record =
            new ProducerRecord<>(fixture.topic(), p, orderNo, "charge " + orderNo);
        record.headers().add(KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
        fixture.producer().send(record).get();
        sent.computeIfAbsent(p, x -> ConcurrentHashMap.newKeySet()).add(orderNo);
      }
    }
    executor = IdempotentExecutor.builder(fixture.store()).build();
    Set<String> applied = ConcurrentHashMap.newKeySet();
    AtomicReference<DedupPollLoop<String, String>> first = new AtomicReference<>();
    AtomicReference<TopicPartition> refused = new AtomicReference<>();
    Set<TopicPartition> polled = ConcurrentHashMap.newKeySet();
    DedupPollLoop<String, String> stoppingLoop =
        loop(
            new KafkaConsumer<String, String>(autoCommittingConfig()) {
              @Override
              public ConsumerRecords<String, String> poll(java.time.Duration timeout) {
                ConsumerRecords<String, String> records = super.poll(timeout);
                if (polled.isEmpty()) {
                  polled.addAll(records.partitions());
                }
                return records;
              }

              @Override
              public void seek(TopicPartition partition, long offset) {
                if (refused.compareAndSet(null, partition)) {
                  throw new IllegalStateException(
                      "No current assignment for partition " + partition);
                }
                super.seek(partition, offset);
              }
            },
            record -> {
              applied.add(record.key());
              first.get().close(); // from the handler, on the first record: the loop stops
            });
    first.set(stoppingLoop);
    Future<?> run = thread.submit(stoppingLoop);
    Throwable ended = null;
    try {
      run.get(WAIT.toSeconds(), TimeUnit.SECONDS);
    } catch (ExecutionException e) {
      ended = e.getCause();
    }
    assertThat(polled).as("partitions of the poll the first loop stopped in").hasSize(partitions);
    assertThat(refused.get()).as("the seek back refused").isNotNull();

    Set<String> expected = new HashSet<>();
    sent.forEach(
        (p, orderNos) -> {
          if (p != refused.get().partition()) {
            expected.addAll(orderNos);
          }
        });
    try (RunningLoop next =
        RunningLoop.start(
            loop(
                new KafkaConsumer<String, String>(autoCommittingConfig()),
                record -> applied.add(record.key())))) {
      await()
          .atMost(WAIT)
          .untilAsserted(
              () ->
                  assertThat(applied)
                      .as(
                          "records of the partitions whose seek back was not refused, handled by"
                              + " the first loop and the next one")
                      .containsAll(expected));
    }
    assertThat(ended).as("what the first loop's run() threw").isNull();
  }

  /**
   * An {@code OutOfMemoryError} as the loop notes where each partition ends (advice for the
   * retention warning, read after the poll returned): it came out of {@code run()} before the try
   * that seeks back what a stop left unreached, and the consumer committed its position past the
   * whole poll as the loop closed it: the poll's records never came again.
   */
  @Test
  void anErrorWhileThePartitionEndsAreNotedLosesNoRecord() throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    for (int i = 0; i < RECORDS; i++) {
      String orderNo = "END-" + i;
      ProducerRecord<String, String> record =
          new ProducerRecord<>(fixture.topic(), 0, orderNo, "charge " + orderNo);
      record.headers().add(KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
      fixture.producer().send(record).get();
    }
    executor = IdempotentExecutor.builder(fixture.store()).build();
    Set<String> applied = ConcurrentHashMap.newKeySet();
    AtomicInteger struck = new AtomicInteger();
    AtomicReference<Boolean> recordsInHand = new AtomicReference<>(false);
    DedupPollLoop<String, String> striking =
        loop(
            new KafkaConsumer<String, String>(autoCommittingConfig()) {
              @Override
              public ConsumerRecords<String, String> poll(java.time.Duration timeout) {
                ConsumerRecords<String, String> records = super.poll(timeout);
                recordsInHand.set(!records.isEmpty());
                return records;
              }

              @Override
              public java.util.OptionalLong currentLag(TopicPartition partition) {
                if (recordsInHand.get() && struck.compareAndSet(0, 1)) {
                  throw new OutOfMemoryError("Java heap space");
                }
                return super.currentLag(partition);
              }
            },
            record -> applied.add(record.key()));
    Future<?> run = thread.submit(striking);
    try {
      await()
          .atMost(WAIT)
          .untilAsserted(
              () -> assertThat(applied).as("records applied by the loop").hasSize(RECORDS));
    } finally {
      striking.close();
    }
    assertThat(struck.get())
        .as("OutOfMemoryErrors thrown as the partition ends were noted")
        .isOne();
    run.get(WAIT.toSeconds(), TimeUnit.SECONDS); // ended by the close, not by the Error
  }

  /** A consumer made as a newcomer makes one: enable.auto.commit not set, so true. */
  private DedupPollLoop<String, String> loop(RecordHandler<String, String> handler) {
    return loop(new KafkaConsumer<String, String>(autoCommittingConfig()), handler);
  }

  private Map<String, Object> autoCommittingConfig() {
    Map<String, Object> config = TestKafka.consumerConfig(fixture.group());
    config.remove(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG);
    config.put(ConsumerConfig.INTERCEPTOR_CLASSES_CONFIG, PollSizes.class.getName());
    return config;
  }

  private DedupPollLoop<String, String> loop(
      KafkaConsumer<String, String> consumer, RecordHandler<String, String> handler) {
    return LoopFixture.quick(
            DedupPollLoop.builder(
                consumer,
                List.of(fixture.topic()),
                IdempotentRecordHandler.<String, String>builder(executor)
                    .bizType(BIZ_TYPE)
                    .key(KeyExtractors.header(KEY_HEADER))
                    .handler(handler)
                    .build()))
        .deadLetterHandler((record, reason) -> {})
        .build();
  }

  /** Tells how many records the largest poll returned. */
  public static final class PollSizes implements ConsumerInterceptor<String, String> {
    static final AtomicInteger largest = new AtomicInteger();

    @Override
    public ConsumerRecords<String, String> onConsume(ConsumerRecords<String, String> records) {
      largest.accumulateAndGet(records.count(), Math::max);
      return records;
    }

    @Override
    public void onCommit(Map<TopicPartition, OffsetAndMetadata> offsets) {}

    @Override
    public void close() {}

    @Override
    public void configure(Map<String, ?> configs) {}
  }
}
