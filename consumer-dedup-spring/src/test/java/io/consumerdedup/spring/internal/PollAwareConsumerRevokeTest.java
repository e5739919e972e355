package io.consumerdedup.spring.internal;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.consumerdedup.core.DedupKey;
import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;

/**
 * The container's rebalance listener throws as partitions are revoked: spring-kafka runs the
 * application's {@code ConsumerAwareRebalanceListener.onPartitionsRevokedBeforeCommit} first, and
 * what that throws skips the container's commit and reaches the consumer, which logs it and throws
 * it from the poll. The offsets {@link PollAwareConsumer} still owes (commits it cut at SUCCESS
 * marks on their way, written since) are committed all the same: the partitions go either way, and
 * their next owner would otherwise read those records again.
 */
class PollAwareConsumerRevokeTest {
  private static final TopicPartition PARTITION = new TopicPartition("payments", 0);

  @Test
  void whatIsOwedIsCommittedThoughTheContainersRevokeListenerThrows() {
    MockConsumer<String, String> kafka = new MockConsumer<>("earliest");
    PollAwareConsumer<String, String> consumer = new PollAwareConsumer<>(kafka);
    IllegalStateException listenerFailure =
        new IllegalStateException("the application's onPartitionsRevokedBeforeCommit failed");
    consumer.subscribe(
        List.of(PARTITION.topic()),
        new ConsumerRebalanceListener() {
          @Override
          public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            if (!partitions.isEmpty()) {
              throw listenerFailure;
            }
          }

          @Override
          public void onPartitionsAssigned(Collection<TopicPartition> partitions) {}
        });
    kafka.rebalance(List.of(PARTITION));
    // Three records done, their SUCCESS marks on their way as the container commits past them.
    CompletableFuture<Void> written = new CompletableFuture<>();
    for (long offset = 0; offset < 3; offset++) {
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
    consumer.commitSync(Map.of(PARTITION, new OffsetAndMetadata(3)));
    assertThat(committedOffset(kafka))
        .as("[committed while the marks are on their way] cut at the first")
        .isEqualTo(0L);
    written.complete(null);

    assertThatThrownBy(() -> kafka.rebalance(List.of()))
        .as("[what the revoke listener threw reaches the consumer as it was]")
        .isSameAs(listenerFailure);

    assertThat(committedOffset(kafka))
        .as("[committed offset of the partition revoked, its records' marks written]")
        .isEqualTo(3L);
  }

  private static long committedOffset(MockConsumer<String, String> kafka) {
    OffsetAndMetadata committed = kafka.committed(Set.of(PARTITION)).get(PARTITION);
    return committed == null ? -1 : committed.offset();
  }
}
