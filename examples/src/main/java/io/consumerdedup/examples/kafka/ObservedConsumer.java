package io.consumerdedup.examples.kafka;

import java.util.Map;
import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RebalanceInProgressException;

/**
 * The {@link KafkaConsumer} of a {@link DedupConsumer}, unchanged but for what the demo needs to
 * see of the loop's offset commits: how far it committed, whether the group refused a commit (the
 * consumer is a zombie), and a hook that runs right before each commit (where the lost-ACK
 * scenario's child waits to be killed).
 */
final class ObservedConsumer extends KafkaConsumer<String, String> {
  private final ConsumerSetup setup;
  private final TopicPartition partition;
  private volatile long committed;
  private volatile boolean fenced;

  ObservedConsumer(ConsumerSetup setup) {
    super(setup.consumerConfig());
    this.setup = setup;
    this.partition = new TopicPartition(setup.topic(), 0);
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
      committed = Math.max(committed, offset.offset());
    }
  }

  /** The highest offset this consumer committed on partition 0; 0 if none. */
  long committed() {
    return committed;
  }

  /** Whether the group refused one of this consumer's commits. */
  boolean fenced() {
    return fenced;
  }
}
