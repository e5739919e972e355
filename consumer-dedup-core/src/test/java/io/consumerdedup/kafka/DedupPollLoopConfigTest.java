package io.consumerdedup.kafka;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.ConnectionSource;
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecords;
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
   * records it had not reached, and the second loop's commits went past them: records lost. The
   * build asked the consumer for its group before it looked for the loop running it, a call from a
   * second thread into the consumer that loop polls.
   */
  @Test
  void aSecondLoopOnAConsumerAnotherLoopOwnsIsRefusedWhenItIsBuilt() throws Exception {
    WatchedConsumer consumer = new WatchedConsumer();
    DedupPollLoop<String, String> owner =
        DedupPollLoop.builder(consumer, List.of("payments"), handler)
            .deadLetterHandler(DEAD_LETTERS)
            .build();
    Thread running = new Thread(owner, "owner-loop");
    consumer.forgetCallers(); // building asks it for its group, on this thread
    running.start();
    try {
      assertThat(consumer.polled.await(20, TimeUnit.SECONDS)).as("the owner polls").isTrue();
      DedupPollLoop.Builder<String, String> second =
          DedupPollLoop.builder(consumer, List.of("refunds"), handler)
              .deadLetterHandler(DEAD_LETTERS);

      assertThatThrownBy(second::build)
          .isInstanceOf(IllegalStateException.class)
          .hasMessageContaining("another DedupPollLoop")
          .hasMessageContaining("not safe for multi-threaded access")
          .hasMessageContaining("its own consumer");
      assertThat(consumer.callersOtherThan(running))
          .as("threads other than the owner's that called into the consumer")
          .isEmpty();
    } finally {
      owner.close();
    }
    assertThatThrownBy(() -> consumer.poll(Duration.ZERO))
        .as("the consumer, closed by the loop that owns it")
        .isInstanceOf(IllegalStateException.class)
        .hasMessageContaining("closed");
  }

  /**
   * Two loops built on one consumer before either ran: the second to run is refused when it starts,
   * before it subscribes or polls the consumer the first runs, and closing it leaves that consumer
   * to the first.
   */
  @Test
  void aLoopOnAConsumerAnotherLoopRunsIsRefusedWhenItRunsWithoutTouchingTheConsumer()
      throws Exception {
    WatchedConsumer consumer = new WatchedConsumer();
    DedupPollLoop<String, String> first =
        DedupPollLoop.builder(consumer, List.of("payments"), handler)
            .deadLetterHandler(DEAD_LETTERS)
            .build();
    DedupPollLoop<String, String> second =
        DedupPollLoop.builder(consumer, List.of("refunds"), handler)
            .deadLetterHandler(DEAD_LETTERS)
            .build();
    Thread running = new Thread(first, "first-loop");
    consumer.forgetCallers(); // building asks it for its group, on this thread
    running.start();
    try {
      assertThat(consumer.polled.await(20, TimeUnit.SECONDS)).as("the first loop polls").isTrue();

      assertThatThrownBy(second::run)
          .isInstanceOf(IllegalStateException.class)
          .hasMessageContaining("another DedupPollLoop")
          .hasMessageContaining("its own consumer");
      second.close();

      assertThat(consumer.callersOtherThan(running))
          .as("threads other than the first loop's that called into the consumer")
          .isEmpty();
      assertThat(running.isAlive()).as("the first loop, still running").isTrue();
    } finally {
      first.close();
    }
    running.join(10_000);
    assertThat(running.isAlive()).as("the first loop, once closed").isFalse();
    assertThatThrownBy(() -> consumer.poll(Duration.ZERO))
        .as("the consumer, closed by the first loop")
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

  /**
   * A loop built and dropped without being run (a start-up step after it failed, and the
   * application built its loops again on the same consumer) kept its consumer for as long as the
   * consumer lived: every later loop on it was refused, though nothing could run the first one; and
   * then until the garbage collector cleared it, so that the rebuild threw or not by chance. A loop
   * holds its consumer only while it runs.
   */
  @Test
  void aLoopDroppedWithoutRunningLeavesItsConsumerToTheNextLoop() {
    KafkaConsumer<String, String> consumer = new KafkaConsumer<>(config(false, "billing"));
    DedupPollLoop<String, String> dropped =
        DedupPollLoop.builder(consumer, List.of("payments"), handler)
            .deadLetterHandler(DEAD_LETTERS)
            .build();

    DedupPollLoop<String, String> next =
        DedupPollLoop.builder(consumer, List.of("payments"), handler)
            .deadLetterHandler(DEAD_LETTERS)
            .build();

    assertThat(next).as("the loop built on the consumer again").isNotSameAs(dropped);
    next.close();
    assertThatThrownBy(() -> consumer.poll(Duration.ZERO))
        .as("the consumer, closed by the loop built last")
        .isInstanceOf(IllegalStateException.class)
        .hasMessageContaining("closed");
  }

  /**
   * Consumers were told apart by their {@code equals}: an application's consumer class whose {@code
   * equals} compares what it was configured with took a second consumer for the first, and its loop
   * was refused as if both loops polled one consumer.
   */
  @Test
  void twoConsumersThatAreEqualButDistinctEachGetALoop() throws Exception {
    EqualConsumer firstConsumer = new EqualConsumer();
    EqualConsumer secondConsumer = new EqualConsumer();
    try (DedupPollLoop<String, String> first =
        DedupPollLoop.builder(firstConsumer, List.of("payments"), handler)
            .deadLetterHandler(DEAD_LETTERS)
            .build()) {
      new Thread(first, "first-loop").start();
      assertThat(firstConsumer.polled.await(20, TimeUnit.SECONDS))
          .as("the first loop polls")
          .isTrue();
      try (DedupPollLoop<String, String> second =
          DedupPollLoop.builder(secondConsumer, List.of("payments"), handler)
              .deadLetterHandler(DEAD_LETTERS)
              .build()) {
        new Thread(second, "second-loop").start();

        assertThat(secondConsumer.polled.await(20, TimeUnit.SECONDS))
            .as("the loop on the second consumer polls")
            .isTrue();
      }
    }
  }

  /**
   * A consumer that tells which threads called into it (subscribe, poll, the group's metadata,
   * wakeup, close), and when it was first polled.
   */
  private static class WatchedConsumer extends KafkaConsumer<String, String> {
    final CountDownLatch polled = new CountDownLatch(1);
    private final Set<Thread> callers = ConcurrentHashMap.newKeySet();

    WatchedConsumer() {
      super(config(false, "billing"));
    }

    void forgetCallers() {
      callers.clear();
    }

    Set<Thread> callersOtherThan(Thread thread) {
      Set<Thread> others = new HashSet<>(callers);
      others.remove(thread);
      return others;
    }

    @Override
    public void subscribe(Collection<String> topics, ConsumerRebalanceListener listener) {
      callers.add(Thread.currentThread());
      super.subscribe(topics, listener);
    }

    @Override
    public ConsumerRecords<String, String> poll(Duration timeout) {
      callers.add(Thread.currentThread());
      try {
        return super.poll(timeout);
      } finally {
        polled.countDown();
      }
    }

    @Override
    public ConsumerGroupMetadata groupMetadata() {
      callers.add(Thread.currentThread());
      return super.groupMetadata();
    }

    @Override
    public void wakeup() {
      callers.add(Thread.currentThread());
      super.wakeup();
    }

    @Override
    public void close(CloseOptions options) {
      callers.add(Thread.currentThread());
      super.close(options);
    }
  }

  /** A consumer equal to any other of its class, as one compared by its configuration is. */
  private static final class EqualConsumer extends WatchedConsumer {
    @Override
    public boolean equals(Object other) {
      return other instanceof EqualConsumer;
    }

    @Override
    public int hashCode() {
      return 1;
    }
  }
}
