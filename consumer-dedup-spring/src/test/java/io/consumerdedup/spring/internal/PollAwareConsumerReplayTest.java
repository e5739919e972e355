package io.consumerdedup.spring.internal;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.DedupKey;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;

/**
 * The application seeks a partition it had consumed to its end back to its first record (a replay):
 * the container's commit of the replay is cut at a SUCCESS mark on its way, and what is cut is
 * committed once the mark is written, though it is no further than what was committed before the
 * seek.
 */
class PollAwareConsumerReplayTest {
  private static final TopicPartition PARTITION = new TopicPartition("payments", 0);

  @Test
  void aReplaysCommitCutAtAMarkIsCommittedInFullOnceTheMarkIsWritten() {
    MockConsumer<String, String> kafka = new MockConsumer<>("earliest");
    PollAwareConsumer<String, String> consumer = new PollAwareConsumer<>(kafka);
    consumer.subscribe(List.of(PARTITION.topic()));
    kafka.rebalance(List.of(PARTITION));
    kafka.updateBeginningOffsets(Map.of(PARTITION, 0L));
    consumer.commitSync(Map.of(PARTITION, new OffsetAndMetadata(10)));

    // Replayed from 0: the marks of its records on their way as the container commits past them.
    CompletableFuture<Void> written = new CompletableFuture<>();
    for (long offset = 0; offset < 10; offset++) {
      consumer
          .poll()
          .marks()
          .add(
              new ConsumerRecord<>(PARTITION.topic(), PARTITION.partition(), offset, null, "v"),
              DedupKey.of("payment", "P-" + offset),
              "payments-0@" + offset,
              written,
              Duration.ofMillis(100),
              () -> true);
    }
    consumer.commitSync(Map.of(PARTITION, new OffsetAndMetadata(10)));
    assertThat(committedOffset(kafka)).as("[cut at the first mark on its way]").isZero();
    written.complete(null);

    consumer.poll(Duration.ofMillis(10));
    consumer.poll(Duration.ofMillis(10)); // the consumer is idle: what is owed is committed

    assertThat(committedOffset(kafka))
        .as("[committed offset once the replayed records' marks are written]")
        .isEqualTo(10L);
  }

  private static long committedOffset(MockConsumer<String, String> kafka) {
    OffsetAndMetadata committed = kafka.committed(Set.of(PARTITION)).get(PARTITION);
    return committed == null ? -1 : committed.offset();
  }
}
