package io.consumerdedup.kafka.internal;

import io.consumerdedup.kafka.DeadLetterHandler;
import io.consumerdedup.kafka.KafkaDeadLetterPublisher;
import java.nio.ByteBuffer;
import java.util.Locale;
import java.util.Optional;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.errors.RecordDeserializationException;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;
import org.jspecify.annotations.Nullable;

/** What is left of a record whose key or value the consumer's deserializer rejected. */
public final class UndeserializableRecords {
  private UndeserializableRecords() {}

  /** The record as the broker holds it: the bytes the deserializer rejected, and the rest. */
  public static ConsumerRecord<byte[], byte[]> raw(RecordDeserializationException e) {
    byte[] key = bytes(e.keyBuffer());
    byte[] value = bytes(e.valueBuffer());
    return new ConsumerRecord<>(
        e.topicPartition().topic(),
        e.topicPartition().partition(),
        e.offset(),
        e.timestamp(),
        e.timestampType() == null ? TimestampType.NO_TIMESTAMP_TYPE : e.timestampType(),
        key == null ? ConsumerRecord.NULL_SIZE : key.length,
        value == null ? ConsumerRecord.NULL_SIZE : value.length,
        key,
        value,
        e.headers() == null ? new RecordHeaders() : new RecordHeaders(e.headers().toArray()),
        Optional.empty());
  }

  /**
   * {@code key} or {@code value}: the part the deserializer rejected; empty if the exception does
   * not say (one made with Kafka's older constructor, by a deserializer or a test).
   */
  public static Optional<String> rejectedPart(RecordDeserializationException e) {
    return Optional.ofNullable(e.origin()).map(origin -> origin.name().toLowerCase(Locale.ROOT));
  }

  /**
   * Why {@code handler} cannot dead-letter a record whose key or value the deserializer rejects,
   * for a warning at start-up that ends with {@code consequence} (what the loop or listener then
   * does with such a record); null if it can. A handler that does not implement {@link
   * DeadLetterHandler#deadLetterUndeserializable} cannot, nor can a {@link
   * KafkaDeadLetterPublisher} built without a raw producer: a user finds out only when the first
   * such record stalls.
   */
  public static @Nullable String cannotBeDeadLetteredBy(
      DeadLetterHandler<?, ?> handler, String consequence) {
    String why;
    if (handler instanceof KafkaDeadLetterPublisher<?, ?> publisher) {
      if (publisher.writesUndeserializable()) {
        return null;
      }
      why = "a KafkaDeadLetterPublisher built without rawProducer(...)";
    } else if (implementsDeadLetterUndeserializable(handler)) {
      return null;
    } else {
      why = handler.getClass().getName() + " does not implement deadLetterUndeserializable";
    }
    return "The dead-letter handler cannot write a record whose key or value the deserializer"
        + " rejects ("
        + why
        + "): "
        + consequence
        + ". Build the KafkaDeadLetterPublisher with rawProducer(...), a Producer<byte[], byte[]>"
        + " with ByteArraySerializer for keys and values, or implement"
        + " DeadLetterHandler.deadLetterUndeserializable";
  }

  private static boolean implementsDeadLetterUndeserializable(DeadLetterHandler<?, ?> handler) {
    try {
      return handler
              .getClass()
              .getMethod("deadLetterUndeserializable", ConsumerRecord.class, Exception.class)
              .getDeclaringClass()
          != DeadLetterHandler.class;
    } catch (NoSuchMethodException | SecurityException e) {
      return true; // cannot tell: no warning rather than a wrong one
    }
  }

  private static byte @Nullable [] bytes(@Nullable ByteBuffer buffer) {
    if (buffer == null) {
      return null;
    }
    // A copy of the view: the consumer throws the same exception again while the record is held.
    ByteBuffer view = buffer.duplicate();
    byte[] bytes = new byte[view.remaining()];
    view.get(bytes);
    return bytes;
  }
}
