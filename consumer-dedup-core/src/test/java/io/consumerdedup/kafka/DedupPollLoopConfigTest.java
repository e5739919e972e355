package io.consumerdedup.kafka;

import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.ConnectionSource;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The loop's configuration is checked when it is built: nothing here connects to a broker or a
 * database (the store connects lazily, and consumers connect on their first poll).
 */
class DedupPollLoopConfigTest {
  private static IdempotentExecutor executor;
  private static IdempotentRecordHandler<String, String> handler;
  private static final DeadLetterHandler<String, String> DEAD_LETTERS =
      (record, reason) -> {
        throw new AssertionError("no record is handled in these tests");
      };

  @BeforeAll
  static void setUp() {
    executor =
        IdempotentExecutor.builder(JdbcDedupStore.builder(ConnectionSource.refusing()).build())
            .build();
    handler =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType("payment")
            .key(KeyExtractors.header("order-no"))
            .handler(record -> {})
            .build();
  }

  @AfterAll
  static void tearDown() {
    executor.close();
  }

  private static Map<String, Object> config(@Nullable Object autoCommit, @Nullable String groupId) {
    Map<String, Object> config = new HashMap<>();
    config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, "127.0.0.1:9");
    config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
    config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
    if (autoCommit != null) {
      config.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, autoCommit);
    }
    if (groupId != null) {
      config.put(ConsumerConfig.GROUP_ID_CONFIG, groupId);
    }
    return config;
  }

  @Test
  void aConfigurationThatLeavesAutoCommitToKafkasDefaultIsRefused() {
    Map<String, Object> config = config(null, "billing");
    config.remove(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG);

    assertThatThrownBy(() -> DedupPollLoop.builder(config, List.of("payments"), handler))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("enable.auto.commit must be false")
        .hasMessageContaining("Kafka's default is true");
  }

  @Test
  void aConfigurationWithAutoCommitOnIsRefused() {
    assertThatThrownBy(
            () -> DedupPollLoop.builder(config("true", "billing"), List.of("payments"), handler))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("enable.auto.commit must be false (it is true)");
  }

  @Test
  void aConfigurationWithoutGroupIsRefused() {
    assertThatThrownBy(
            () -> DedupPollLoop.builder(config(false, null), List.of("payments"), handler))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("group.id is required");
  }

  @Test
  void aConsumerWithoutGroupIsRefusedWhenTheLoopIsBuilt() {
    KafkaConsumer<String, String> consumer = new KafkaConsumer<>(config(false, null));
    try {
      DedupPollLoop.Builder<String, String> builder =
          DedupPollLoop.builder(consumer, List.of("payments"), handler)
              .deadLetterHandler(DEAD_LETTERS);

      assertThatThrownBy(builder::build)
          .isInstanceOf(IllegalStateException.class)
          .hasMessageContaining("group.id");
    } finally {
      consumer.close();
    }
  }

  @Test
  void aLoopWithoutDeadLetterHandlerIsRefused() {
    DedupPollLoop.Builder<String, String> builder =
        DedupPollLoop.builder(config("false", "billing"), List.of("payments"), handler);

    assertThatThrownBy(builder::build)
        .isInstanceOf(IllegalStateException.class)
        .hasMessageContaining("deadLetterHandler is required");
  }

  @Test
  void badValuesAreRefusedWithTheValueInTheMessage() {
    DedupPollLoop.Builder<String, String> builder =
        DedupPollLoop.builder(config(false, "billing"), List.of("payments"), handler);

    assertThatThrownBy(() -> builder.maxAttempts(0))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("maxAttempts must be at least 1, was 0");
    assertThatThrownBy(() -> builder.retryBackOff(Duration.ZERO))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("retryBackOff must be positive, was PT0S");
    assertThatThrownBy(() -> builder.holdBackOff(Duration.ofSeconds(5), Duration.ofSeconds(1)))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("PT5S")
        .hasMessageContaining("PT1S");
    assertThatThrownBy(() -> DedupPollLoop.builder(config(false, "billing"), List.of(), handler))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("topics must not be empty");
  }

  /**
   * A second loop on a consumer a loop owns polled it from a second thread: kafka-clients refuses
   * one loop's call while the other is inside one (ConcurrentModificationException), and succeeds
   * while the other runs its handler. The second loop's subscribe replaced the first one's
   * rebalance listener; a poll of the first loop ended on the exception without seeking back the
   * records it had not reached, and the second loop's commits went past them: records lost.
   */
  @Test
  void aSecondLoopOnAConsumerAnotherLoopOwnsIsRefusedWhenItIsBuilt() {
    KafkaConsumer<String, String> consumer = new KafkaConsumer<>(config(false, "billing"));
    DedupPollLoop<String, String> owner =
        DedupPollLoop.builder(consumer, List.of("payments"), handler)
            .deadLetterHandler(DEAD_LETTERS)
            .build();
    try {
      DedupPollLoop.Builder<String, String> second =
          DedupPollLoop.builder(consumer, List.of("refunds"), handler)
              .deadLetterHandler(DEAD_LETTERS);

      assertThatThrownBy(second::build)
          .isInstanceOf(IllegalStateException.class)
          .hasMessageContaining("another DedupPollLoop")
          .hasMessageContaining("not safe for multi-threaded access")
          .hasMessageContaining("its own consumer");
    } finally {
      owner.close();
    }
    assertThatThrownBy(() -> consumer.poll(Duration.ZERO))
        .as("the consumer, closed by the loop that owns it")
        .isInstanceOf(IllegalStateException.class)
        .hasMessageContaining("closed");
  }

  @Test
  void aLoopClosedBeforeItRanClosesItsConsumerAndCannotRunAfterwards() {
    KafkaConsumer<String, String> consumer = new KafkaConsumer<>(config(false, "billing"));
    DedupPollLoop<String, String> loop =
        DedupPollLoop.builder(consumer, List.of("payments"), handler)
            .deadLetterHandler(DEAD_LETTERS)
            .build();

    loop.close();

    assertThatThrownBy(() -> consumer.poll(Duration.ZERO))
        .isInstanceOf(IllegalStateException.class)
        .hasMessageContaining("closed");
    assertThatThrownBy(loop::run)
        .isInstanceOf(IllegalStateException.class)
        .hasMessageContaining("runs once");
  }
}
