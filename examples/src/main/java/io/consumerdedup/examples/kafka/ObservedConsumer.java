package io.consumerdedup.examples.kafka;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetCommitCallback;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RebalanceInProgressException;

/**
 * The {@link KafkaConsumer} of a {@link DedupConsumer}, unchanged but for what the demo needs to
 * see of the loop's offset commits: how far its group committed, whether the group refused a commit
 * (the consumer is a zombie), and a hook that runs right before each commit (where the lost-ACK
 * scenario's child waits to be killed).
 */
final class ObservedConsumer extends KafkaConsumer<String, String> {
  /**
   * The highest offset any consumer of this JVM committed, per group and topic: after a rebalance
   * the zombie of the zombie scenario may rejoin, get the partition back and commit past the record
   * itself, and its successor then has nothing left to commit.
   */
  private static final Map<String, Long> GROUP_COMMITTED = new ConcurrentHashMap<>();

  private final ConsumerSetup setup;
  private final TopicPartition partition;
  private final String groupPartition;
  private volatile boolean fenced;

  ObservedConsumer(ConsumerSetup setup) {
    super(setup.consumerConfig());
    this.setup = setup;
    this.partition = new TopicPartition(setup.topic(), 0);
    this.groupPartition =
        setup.consumerConfig().get(ConsumerConfig.GROUP_ID_CONFIG) + "/" + partition;
  }

  @Override
  public void commitSync(Map<TopicPartition, OffsetAndMetadata> offsets) {
    setup.beforeCommit();
    try {
      super.commitSync(offsets);
    } catch (CommitFailedException | RebalanceInProgressException e) {
      fenced = true;
      setup.step("offset commit refused, the partition has moved to another member");
      throw e;
    }
    OffsetAndMetadata offset = offsets.get(partition);
    if (offset != null) {
      GROUP_COMMITTED.merge(groupPartition, offset.offset(), Math::max);
    }
  }

  /** The loop commits each poll asynchronously; the demo sees those commits once answered. */
  @Override
  public void commitAsync(
      Map<TopicPartition, OffsetAndMetadata> offsets, OffsetCommitCallback callback) {
    setup.beforeCommit();
    super.commitAsync(
        offsets,
        (committed, e) -> {
          if (e instanceof CommitFailedException || e instanceof RebalanceInProgressException) {
            fenced = true;
            setup.step("offset commit refused, the partition has moved to another member");
          } else if (e == null) {
            OffsetAndMetadata offset = offsets.get(partition);
            if (offset != null) {
              GROUP_COMMITTED.merge(groupPartition, offset.offset(), Math::max);
            }
          }
          if (callback != null) {
            callback.onComplete(committed, e);
          }
        });
  }

  /** The highest offset any consumer of this group committed on partition 0; 0 if none. */
  long groupCommitted() {
    return GROUP_COMMITTED.getOrDefault(groupPartition, 0L);
  }

  /** Whether the group refused one of this consumer's commits. */
  boolean fenced() {
    return fenced;
  }
}
