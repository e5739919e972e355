package io.consumerdedup.kafka;

import io.consumerdedup.core.internal.FailureTexts;
import io.consumerdedup.kafka.internal.RecordSources;
import io.consumerdedup.kafka.internal.UndeserializableRecords;
import java.time.Duration;
import java.util.function.BiConsumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.ShareConsumer;
import org.apache.kafka.common.errors.RecordDeserializationException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * {@link DedupShareLoop}'s polls, for new records and for renewed ones. A record the deserializer
 * rejects is handed, with its raw bytes, to {@code undeserializable}, whose dead letter is written
 * as the loop's others are: on the worker, within the loop's close bound, the record in flight
 * meanwhile. Written here, on the loop's thread, a dead-letter send that hung for the producer's
 * send timeout held the loop's stop past its bound.
 */
final class SharePolls<K, V> {
  private static final Logger log = LoggerFactory.getLogger(SharePolls.class);

  private final ShareConsumer<K, V> consumer;
  private final BiConsumer<ConsumerRecord<byte[], byte[]>, RecordDeserializationException>
      undeserializable;
  private final Duration pollTimeout;
  private final String groupId;

  SharePolls(
      ShareConsumer<K, V> consumer,
      BiConsumer<ConsumerRecord<byte[], byte[]>, RecordDeserializationException> undeserializable,
      Duration pollTimeout,
      String groupId) {
    this.consumer = consumer;
    this.undeserializable = undeserializable;
    this.pollTimeout = pollTimeout;
    this.groupId = groupId;
  }

  /** The new records of one poll; none if it met a record the deserializer rejected. */
  ConsumerRecords<K, V> poll() {
    return poll(pollTimeout);
  }

  /**
   * As {@link #poll()}, waiting at most {@code timeout}: also the poll that takes renewed records
   * back, which meets a rejected record the poll before it kept for the next one once no renewal is
   * on its way (the one sent refused). Thrown from there, the rejection ended the loop.
   */
  ConsumerRecords<K, V> poll(Duration timeout) {
    try {
      return consumer.poll(timeout);
    } catch (RecordDeserializationException e) {
      ConsumerRecord<byte[], byte[]> raw = UndeserializableRecords.raw(e);
      log.error(
          "{} cannot be deserialized (its {} was rejected)",
          RecordSources.describe(raw, groupId),
          UndeserializableRecords.rejectedPart(e).orElse("key or value"),
          // Its cause is the deserializer's exception, which Logback prints: one whose message
          // throws must not end the worker before the record is dead-lettered.
          FailureTexts.loggable(e));
      undeserializable.accept(raw, e);
      return ConsumerRecords.empty();
    } catch (Error e) {
      // kafka-clients (4.2) wraps only a deserializer's RuntimeException with the record's bytes
      // and coordinates: an Error comes out bare. Without a word the user saw the loop end on a
      // StackOverflowError and, after a few restarts, the record gone, with no dead letter.
      log.error(
          "A poll of share group {} threw {}: a deserializer's, most likely, which"
              + " kafka-clients passes on without the record, so it cannot be dead-lettered. The"
              + " loop stops; its consumer's close gives the records it acquired back, a delivery"
              + " counted each, and a loop restarted on them again and again has the broker"
              + " archive them at the group's delivery count limit, without a dead letter. A"
              + " deserializer that throws an exception instead (a SerializationException) has"
              + " the record dead-lettered",
          groupId,
          e.toString());
      throw e;
    }
  }
}
