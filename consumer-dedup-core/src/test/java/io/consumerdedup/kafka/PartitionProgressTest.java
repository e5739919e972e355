package io.consumerdedup.kafka;

import static org.assertj.core.api.Assertions.assertThat;

import java.time.Duration;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;

/**
 * A partition held while the dedup store was away is due again the moment the store answers, its
 * back-off from the start; one held for another reason keeps its wait.
 */
class PartitionProgressTest {
  private static final Duration INITIAL = Duration.ofSeconds(1);
  private static final Duration MAX = Duration.ofSeconds(30);
  private final TopicPartition held = new TopicPartition("orders", 0);
  private final TopicPartition inProgress = new TopicPartition("orders", 1);
  private final PartitionProgress progress = new PartitionProgress();

  /**
   * Holds {@code partition} {@code times} in a row, as a long outage does; returns the last wait.
   */
  private Duration holdRepeatedly(TopicPartition partition, int times, long nowNanos) {
    Duration wait = Duration.ZERO;
    for (int i = 0; i < times; i++) {
      wait = progress.nextHold(partition, INITIAL, MAX);
    }
    progress.pausedUntil(partition, 0, nowNanos + wait.toNanos());
    return wait;
  }

  @Test
  void aPartitionHeldForTheStoreIsDueOnceTheStoreAnswersWithItsBackOffFromTheStart() {
    long now = 1_000_000_000L;
    assertThat(holdRepeatedly(held, 6, now)).isEqualTo(MAX);
    progress.waitingForStore(held);
    assertThat(holdRepeatedly(inProgress, 6, now)).isEqualTo(MAX);

    progress.storeAnswered(now + 1);

    assertThat(progress.dueAt(now + 1)).containsExactly(held);
    assertThat(progress.nextHold(held, INITIAL, MAX)).isEqualTo(INITIAL);
    assertThat(progress.nextHold(inProgress, INITIAL, MAX)).isEqualTo(MAX);
  }

  @Test
  void aPartitionSettledMeanwhileIsNotResumedLater() {
    long now = 5_000_000_000L;
    holdRepeatedly(held, 3, now);
    progress.waitingForStore(held);
    progress.settled(held);
    progress.dueAt(now + MAX.toNanos()); // resumed on its own
    holdRepeatedly(held, 3, now + MAX.toNanos());

    progress.storeAnswered(now + MAX.toNanos() + 1);

    assertThat(progress.dueAt(now + MAX.toNanos() + 1)).isEmpty();
  }
}
