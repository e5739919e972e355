package io.consumerdedup.kafka;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.ConnectionSource;
import java.time.Duration;
import java.util.ConcurrentModificationException;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.Test;

/**
 * A loop built on a consumer checks that no loop runs it, then asks the consumer for its group: a
 * loop that starts running the consumer between the two is inside the consumer when the build asks
 * it. kafka-clients refuses the build's call then, and the build threw that refusal ({@code
 * ConcurrentModificationException}, naming no loop) instead of saying that another loop runs the
 * consumer. Nothing here connects to a broker or a database.
 */
class DedupPollLoopBuildRaceTest {
  private static final DeadLetterHandler<String, String> DEAD_LETTERS =
      (record, reason) -> {
        throw new AssertionError("no record is handled in this test");
      };

  @Test
  void aLoopThatStartsRunningTheConsumerWhileASecondIsBuiltGetsItRefusedClearly() throws Exception {
    try (IdempotentExecutor executor =
        IdempotentExecutor.builder(JdbcDedupStore.builder(ConnectionSource.refusing()).build())
            .build()) {
      IdempotentRecordHandler<String, String> handler =
          IdempotentRecordHandler.<String, String>builder(executor)
              .bizType("payment")
              .key(KeyExtractors.header("order-no"))
              .handler(record -> {})
              .build();
      StartingConsumer consumer = new StartingConsumer();
      DedupPollLoop<String, String> owner =
          DedupPollLoop.builder(consumer, List.of("payments"), handler)
              .deadLetterHandler(DEAD_LETTERS)
              .pollTimeout(Duration.ofSeconds(20)) // the consumer stays held all that time
              .closeTimeout(Duration.ofSeconds(1))
              .build();
      Thread running = new Thread(owner, "owner-loop");
      DedupPollLoop.Builder<String, String> second =
          DedupPollLoop.builder(consumer, List.of("refunds"), handler)
              .deadLetterHandler(DEAD_LETTERS);
      consumer.startWhenAskedForItsGroup = running;
      try {
        assertThatThrownBy(second::build)
            .isInstanceOf(IllegalStateException.class)
            .hasMessageContaining("another DedupPollLoop")
            .hasMessageContaining("its own consumer");
        assertThat(consumer.ownerHeldIt)
            .as("the owner loop was inside the consumer when the build asked it for its group")
            .isTrue();
        assertThat(running.isAlive()).as("the owner loop, still running").isTrue();
      } finally {
        owner.close();
      }
      running.join(10_000);
      assertThat(running.isAlive()).as("the owner loop, once closed").isFalse();
    }
  }

  /**
   * A consumer that, asked for its group while {@link #startWhenAskedForItsGroup} is set, first
   * starts that loop and answers only once the loop is inside its poll.
   */
  private static final class StartingConsumer extends KafkaConsumer<String, String> {
    volatile @Nullable Thread startWhenAskedForItsGroup;
    volatile boolean ownerHeldIt;
    private final CountDownLatch polling = new CountDownLatch(1);

    StartingConsumer() {
      super(
          Map.of(
              ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG,
              "127.0.0.1:9",
              ConsumerConfig.GROUP_ID_CONFIG,
              "billing",
              ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG,
              false,
              ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG,
              StringDeserializer.class,
              ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG,
              StringDeserializer.class));
    }

    @Override
    public ConsumerRecords<String, String> poll(Duration timeout) {
      polling.countDown();
      return super.poll(timeout);
    }

    @Override
    public ConsumerGroupMetadata groupMetadata() {
      Thread loop = startWhenAskedForItsGroup;
      if (loop != null) {
        startWhenAskedForItsGroup = null;
        loop.start();
        try {
          assertThat(polling.await(20, TimeUnit.SECONDS)).as("the owner loop polls").isTrue();
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          throw new AssertionError(e);
        }
        // Until the loop's poll holds the consumer (the poll it entered holds it throughout).
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (!ownerHeldIt && System.nanoTime() - deadline < 0) {
          try {
            super.subscription();
            LockSupport.parkNanos(1_000_000);
          } catch (ConcurrentModificationException held) {
            ownerHeldIt = true;
          }
        }
      }
      return super.groupMetadata();
    }
  }
}
