package io.consumerdedup.bench;

import java.time.Duration;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;

/**
 * A {@link KafkaConsumer} of String keys and values that tells its {@link Probe} when a poll
 * returned records and when it committed: any poll loop, ours or a plain one, is measured the same
 * way, without changing it.
 */
public final class MeasuredConsumer extends KafkaConsumer<String, String> {
  private final Probe probe;

  /** A consumer with {@code config} (String deserializers) reporting to {@code probe}. */
  public MeasuredConsumer(Map<String, Object> config, Probe probe) {
    super(config);
    this.probe = probe;
  }

  @Override
  public ConsumerRecords<String, String> poll(Duration timeout) {
    ConsumerRecords<String, String> records = super.poll(timeout);
    if (!records.isEmpty()) {
      probe.pollReturned();
    }
    return records;
  }

  @Override
  public void commitSync() {
    super.commitSync();
    probe.commitSynced();
  }

  @Override
  public void commitSync(Duration timeout) {
    super.commitSync(timeout);
    probe.commitSynced();
  }

  @Override
  public void commitSync(Map<TopicPartition, OffsetAndMetadata> offsets) {
    super.commitSync(offsets);
    probe.commitSynced();
  }

  @Override
  public void commitSync(Map<TopicPartition, OffsetAndMetadata> offsets, Duration timeout) {
    super.commitSync(offsets, timeout);
    probe.commitSynced();
  }
}
