package io.consumerdedup.spring.internal;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.springframework.transaction.support.TransactionSynchronization;
import org.springframework.transaction.support.TransactionSynchronizationManager;

/**
 * An {@code @Idempotent} listener commits asynchronously through its {@code Consumer} argument,
 * with a callback, and its call then fails: the commit, held until the call's outcome was settled,
 * is dropped; so is one made inside the listener's database transaction, which then rolls back.
 * Kafka tells a callback how every commit ended; one never told leaves whatever waits on it (a
 * future the application completes there, a count of commits in flight) waiting for good.
 */
class PollAwareConsumerHeldAsyncCommitTest {
  private static final TopicPartition PARTITION = new TopicPartition("payments", 0);

  @Test
  void aHeldAsyncCommitDroppedAsTheListenerFailedTellsItsCallbackItWasNotCommitted() {
    MockConsumer<String, String> kafka = new MockConsumer<>("earliest");
    PollAwareConsumer<String, String> consumer = new PollAwareConsumer<>(kafka);
    consumer.subscribe(List.of("payments"));
    kafka.rebalance(List.of(PARTITION));
    kafka.updateBeginningOffsets(Map.of(PARTITION, 0L));

    consumer.holdCommits(); // the listener's call begins
    CompletableFuture<Map<TopicPartition, OffsetAndMetadata>> commitEnded =
        new CompletableFuture<>();
    consumer.commitAsync(
        Map.of(PARTITION, new OffsetAndMetadata(1)),
        (offsets, e) -> {
          if (e != null) {
            commitEnded.completeExceptionally(e);
          } else {
            commitEnded.complete(offsets);
          }
        });
    consumer.releaseCommits(false); // the call threw: its commits are dropped

    assertThat(kafka.committed(Set.of(PARTITION)).get(PARTITION))
        .as("[offset committed past the record whose call failed]")
        .isNull();
    assertThat(commitEnded)
        .as("[the listener's commit callback, its commit dropped as the call failed]")
        .isCompletedExceptionally();
  }

  @Test
  void anAsyncCommitLeftToATransactionThatRollsBackTellsItsCallbackItWasNotCommitted() {
    MockConsumer<String, String> kafka = new MockConsumer<>("earliest");
    PollAwareConsumer<String, String> consumer = new PollAwareConsumer<>(kafka);
    consumer.subscribe(List.of("payments"));
    kafka.rebalance(List.of(PARTITION));
    kafka.updateBeginningOffsets(Map.of(PARTITION, 0L));

    CompletableFuture<Map<TopicPartition, OffsetAndMetadata>> commitEnded =
        new CompletableFuture<>();
    TransactionSynchronizationManager.initSynchronization(); // the listener's transaction
    try {
      consumer.commitAsync(
          Map.of(PARTITION, new OffsetAndMetadata(1)),
          (offsets, e) -> {
            if (e != null) {
              commitEnded.completeExceptionally(e);
            } else {
              commitEnded.complete(offsets);
            }
          });
      for (TransactionSynchronization synchronization :
          TransactionSynchronizationManager.getSynchronizations()) {
        synchronization.afterCompletion(TransactionSynchronization.STATUS_ROLLED_BACK);
      }
    } finally {
      TransactionSynchronizationManager.clearSynchronization();
    }

    assertThat(kafka.committed(Set.of(PARTITION)).get(PARTITION))
        .as("[offset committed past the record whose transaction rolled back]")
        .isNull();
    assertThat(commitEnded)
        .as("[the listener's commit callback, its commit dropped as its transaction rolled back]")
        .isCompletedExceptionally();
  }
}
