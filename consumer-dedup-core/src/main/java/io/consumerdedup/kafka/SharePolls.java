package io.consumerdedup.kafka;

import io.consumerdedup.kafka.internal.RecordSources;
import io.consumerdedup.kafka.internal.UndeserializableRecords;
import java.time.Duration;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.ShareConsumer;
import org.apache.kafka.common.errors.RecordDeserializationException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * {@link DedupShareLoop}'s polls for new records. A record the deserializer rejects is
 * dead-lettered with its raw bytes, then rejected; if its dead letter cannot be written, the
 * consumer releases it for another delivery.
 */
final class SharePolls<K, V> {
  private static final Logger log = LoggerFactory.getLogger(SharePolls.class);

  private final ShareConsumer<K, V> consumer;
  private final DeadLetterHandler<K, V> deadLetters;
  private final Duration pollTimeout;
  private final String groupId;

  SharePolls(
      ShareConsumer<K, V> consumer,
      DeadLetterHandler<K, V> deadLetters,
      Duration pollTimeout,
      String groupId) {
    this.consumer = consumer;
    this.deadLetters = deadLetters;
    this.pollTimeout = pollTimeout;
    this.groupId = groupId;
  }

  /** The new records of one poll; none if it met a record the deserializer rejected. */
  ConsumerRecords<K, V> poll() {
    try {
      return consumer.poll(pollTimeout);
    } catch (RecordDeserializationException e) {
      ConsumerRecord<byte[], byte[]> raw = UndeserializableRecords.raw(e);
      log.error(
          "{} cannot be deserialized (its {} was rejected); dead-lettering it",
          RecordSources.describe(raw, groupId),
          UndeserializableRecords.rejectedPart(e).orElse("key or value"),
          e);
      try {
        deadLetters.deadLetterUndeserializable(raw, e);
        consumer.acknowledge(raw.topic(), raw.partition(), raw.offset(), AcknowledgeType.REJECT);
      } catch (RuntimeException failed) {
        log.error(
            "Could not dead-letter {}; it is delivered again",
            RecordSources.describe(raw, groupId),
            failed);
        consumer.acknowledge(raw.topic(), raw.partition(), raw.offset(), AcknowledgeType.RELEASE);
      }
      return ConsumerRecords.empty();
    }
  }
}
