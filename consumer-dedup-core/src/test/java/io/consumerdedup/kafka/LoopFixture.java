package io.consumerdedup.kafka;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.testing.StoreFixture;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.UUID;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.junit.jupiter.api.extension.BeforeEachCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * What the poll-loop tests share, registered as a static {@code @RegisterExtension}: the {@link
 * StoreFixture}'s schema and store (pool of 4), a String producer per test class; per test a fresh
 * topic name and consumer group, so tests run in any order.
 */
final class LoopFixture extends StoreFixture implements BeforeEachCallback {
  static final String BIZ_TYPE = "payment";
  static final String KEY_HEADER = "order-no";
  static final Duration WAIT = Duration.ofSeconds(20);

  private KafkaProducer<String, String> producer;
  private String topic;
  private String group;

  LoopFixture(String schemaPrefix) {
    super(schemaPrefix, 4);
  }

  @Override
  public void beforeAll(ExtensionContext context) {
    super.beforeAll(context);
    producer = TestKafka.producer();
  }

  @Override
  public void afterAll(ExtensionContext context) {
    producer.close();
    super.afterAll(context);
  }

  @Override
  public void beforeEach(ExtensionContext context) {
    String id = UUID.randomUUID().toString().substring(0, 8);
    topic = "payments-" + id;
    group = "billing-" + id;
  }

  KafkaProducer<String, String> producer() {
    return producer;
  }

  /** This test's topic (not created: each test chooses its partitions). */
  String topic() {
    return topic;
  }

  /** This test's consumer group. */
  String group() {
    return group;
  }

  /** Back-offs and polls short enough for tests; the rest as given. */
  static <K, V> DedupPollLoop.Builder<K, V> quick(DedupPollLoop.Builder<K, V> builder) {
    return builder
        .retryBackOff(Duration.ofMillis(50))
        .holdBackOff(Duration.ofMillis(100), Duration.ofMillis(200))
        .pollTimeout(Duration.ofMillis(200));
  }

  /**
   * A handler building on {@code executor}: bizType {@link #BIZ_TYPE}, each record keyed by its
   * {@link #KEY_HEADER} header; the caller adds the work and whatever else it needs.
   */
  static IdempotentRecordHandler.Builder<String, String> handler(IdempotentExecutor executor) {
    return IdempotentRecordHandler.<String, String>builder(executor)
        .bizType(BIZ_TYPE)
        .key(KeyExtractors.header(KEY_HEADER));
  }

  /** Waits until the offsets {@code inGroup} has committed include these. */
  static void awaitCommitted(String inGroup, Map<TopicPartition, Long> offsets) {
    awaitCommitted(inGroup, offsets, WAIT);
  }

  /** As above, for a test whose records take longer than {@link #WAIT} on a loaded machine. */
  static void awaitCommitted(String inGroup, Map<TopicPartition, Long> offsets, Duration wait) {
    await()
        .atMost(wait)
        .untilAsserted(
            () -> assertThat(TestKafka.committedOffsets(inGroup)).containsAllEntriesOf(offsets));
  }

  /** The last header of that name, as UTF-8 text; fails the test if there is none. */
  static String header(ConsumerRecord<?, ?> record, String name) {
    Header header = record.headers().lastHeader(name);
    assertThat(header).as("header " + name).isNotNull();
    return new String(header.value(), StandardCharsets.UTF_8);
  }

  static String orderNo(ConsumerRecord<?, ?> record) {
    return header(record, KEY_HEADER);
  }
}
