package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.core.DedupException;
import io.consumerdedup.core.Disposition;
import io.consumerdedup.core.internal.FailureTexts;
import io.consumerdedup.kafka.DeadLetterHandler;
import io.consumerdedup.kafka.internal.UndeserializableRecords;
import io.consumerdedup.spring.internal.Coordinates;
import io.consumerdedup.spring.internal.DeserializationFailures;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Objects;
import java.util.Optional;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.errors.RecordDeserializationException;
import org.apache.kafka.common.errors.RecordDeserializationException.DeserializationExceptionOrigin;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.kafka.support.serializer.DeserializationException;
import org.springframework.kafka.support.serializer.SerializationUtils;

/**
 * Records of a share container whose key or value could not be deserialized, of two kinds:
 *
 * <ul>
 *   <li>Spring-kafka's {@code ErrorHandlingDeserializer} could not deserialize it: the record
 *       reaches the listener with a null in place of the part that failed and the failure in a
 *       header ({@link DeserializationFailures}). A record container of a consumer group turns that
 *       header into an exception for its error handler, spring-kafka 4.1's share container does
 *       not. Called with it, a listener that took the null in its stride had its key marked SUCCESS
 *       and the business action was lost; one that threw had it retried on every delivery and
 *       dead-lettered with a null value.
 *   <li>The consumer's own deserializer rejected it, and its poll threw: the container's wrapped
 *       consumer ({@link WrappedShareConsumers}) returns it as a {@link RejectedByPoll}.
 * </ul>
 *
 * Either is dead-lettered at once, with the bytes it was sent with, as {@code DedupShareLoop}
 * dead-letters a record its deserializer rejects, and the listener is not called.
 */
final class ShareDeserializationFailures {
  private static final Logger log = LoggerFactory.getLogger(ShareDeserializationFailures.class);

  private ShareDeserializationFailures() {}

  /**
   * Whether the {@code ErrorHandlingDeserializer} could not deserialize the record's key or value:
   * no key is claimed for it. (A {@link RejectedByPoll} never reaches the listener's processor: it
   * goes to the worker with its raw bytes.)
   */
  static boolean undeserialized(ConsumerRecord<?, ?> record) {
    return DeserializationFailures.carriesOne(record);
  }

  /**
   * Throws {@link Undeserializable} if the {@code ErrorHandlingDeserializer} could not deserialize
   * the record's key or value; its disposition has the worker dead-letter the record at once and
   * reject it.
   */
  static void refuseIfUndeserialized(ConsumerRecord<?, ?> record, String groupId) {
    if (!DeserializationFailures.carriesOne(record)) {
      return;
    }
    DeserializationException key = DeserializationFailures.key(record);
    DeserializationException value = DeserializationFailures.value(record);
    if (key == null && value == null) {
      return; // a header that could not be read back: nothing to dead-letter the record with
    }
    String source = Coordinates.of(record) + " (group " + groupId + ")";
    String part = key == null ? "value" : value == null ? "key" : "key and value";
    throw new Undeserializable(
        "The consumer's ErrorHandlingDeserializer could not deserialize the " + part,
        source,
        rejected(record, key, value, part, source));
  }

  /**
   * The record as the broker holds it, in the form {@link
   * DeadLetterHandler#deadLetterUndeserializable} takes: the part that failed as the bytes the
   * deserializer was given, the part that did not as bytes again (a {@code byte[]} as is, a String
   * in UTF-8, what {@code StringDeserializer} read; any other type left out, and said).
   */
  private static RecordDeserializationException rejected(
      ConsumerRecord<?, ?> record,
      @Nullable DeserializationException key,
      @Nullable DeserializationException value,
      String part,
      String source) {
    // Kafka's consumer deserializes the key first, and names the key when both fail.
    DeserializationException first = key != null ? key : Objects.requireNonNull(value);
    DeserializationExceptionOrigin origin =
        key != null ? DeserializationExceptionOrigin.KEY : DeserializationExceptionOrigin.VALUE;
    Headers headers = new RecordHeaders(record.headers().toArray());
    // A Java-serialized exception, of no use to the reader of the dead letter, whose own headers
    // say what failed (spring-kafka's dead-letter recoverer drops it too).
    headers.remove(SerializationUtils.KEY_DESERIALIZER_EXCEPTION_HEADER);
    headers.remove(SerializationUtils.VALUE_DESERIALIZER_EXCEPTION_HEADER);
    Throwable cause = first.getCause() != null ? first.getCause() : first;
    RecordDeserializationException rejected =
        new RecordDeserializationException(
            origin,
            Coordinates.of(record).topicPartition(),
            record.offset(),
            record.timestamp(),
            record.timestampType(),
            buffer(key != null ? key.getData() : bytes(record.key(), "key", source)),
            buffer(value != null ? value.getData() : bytes(record.value(), "value", source)),
            headers,
            "The "
                + part
                + " of "
                + source
                + " could not be deserialized (the consumer's ErrorHandlingDeserializer passed"
                + " the failure on in a header); dead-lettered with the bytes it was sent with,"
                + " the listener not called",
            cause);
    if (key != null && value != null) {
      rejected.addSuppressed(value.getCause() != null ? value.getCause() : value);
    }
    return rejected;
  }

  private static byte @Nullable [] bytes(@Nullable Object part, String name, String source) {
    if (part == null || part instanceof byte[]) {
      return (byte[]) part;
    }
    if (part instanceof String text) {
      return text.getBytes(StandardCharsets.UTF_8);
    }
    log.warn(
        "The dead letter of {} goes without its {}: a {} read by the consumer's deserializer, whose"
            + " bytes are not kept",
        source,
        name,
        part.getClass().getName());
    return null;
  }

  private static @Nullable ByteBuffer buffer(byte @Nullable [] bytes) {
    return bytes == null ? null : ByteBuffer.wrap(bytes);
  }

  /**
   * The dead letters of {@code delegate}, where a record refused here is written with its bytes
   * ({@link DeadLetterHandler#deadLetterUndeserializable}), not as the record the listener would
   * have had.
   */
  static <K, V> DeadLetterHandler<K, V> withRawBytes(DeadLetterHandler<K, V> delegate) {
    return new DeadLetterHandler<>() {
      @Override
      public void deadLetter(ConsumerRecord<K, V> record, Exception reason) {
        if (reason instanceof Undeserializable undeserializable) {
          RecordDeserializationException rejected = undeserializable.rejected();
          delegate.deadLetterUndeserializable(UndeserializableRecords.raw(rejected), rejected);
        } else {
          delegate.deadLetter(record, reason);
        }
      }

      @Override
      public void deadLetterUndeserializable(
          ConsumerRecord<byte[], byte[]> record, Exception reason) {
        delegate.deadLetterUndeserializable(record, reason);
      }
    };
  }

  /** A record whose key or value could not be deserialized: dead-letter it now. */
  static final class Undeserializable extends DedupException {
    private static final long serialVersionUID = 1L;

    private final RecordDeserializationException rejected;

    Undeserializable(String failure, String source, RecordDeserializationException rejected) {
      super(
          failure
              + " ("
              // The delegate's exception, read back from its header: one whose getMessage()
              // throws had the record retried as a handler failure and dead-lettered without
              // its bytes.
              + causeOf(rejected)
              + "): dead-lettering the record with its bytes, the listener not called",
          null,
          source,
          rejected);
      this.rejected = rejected;
    }

    private static String causeOf(RecordDeserializationException rejected) {
      Throwable cause = rejected.getCause();
      return cause == null ? "no error given" : FailureTexts.describe(cause);
    }

    /** The record's bytes, headers and coordinates, and the deserializer's error as its cause. */
    RecordDeserializationException rejected() {
      return rejected;
    }

    /** {@link Disposition#DEAD_LETTER}: a redelivery carries the same bytes. */
    @Override
    public Disposition disposition() {
      return Disposition.DEAD_LETTER;
    }
  }

  /**
   * A record the consumer's poll threw for, its deserializer having rejected its key or value: what
   * the wrapped consumer hands the container in its stead, so that the listener's worker writes its
   * dead letter, with the bytes it was sent with, before it is rejected. Its key and value are
   * null; no listener is called with it.
   */
  static final class RejectedByPoll<K, V> extends ConsumerRecord<K, V> {
    private final RecordDeserializationException rejected;
    private final long lockEndsNanos;

    /**
     * {@code lockEndsNanos}: when its acquisition lock, which cannot be renewed, runs out ({@link
     * System#nanoTime()}).
     */
    RejectedByPoll(RecordDeserializationException rejected, long lockEndsNanos) {
      super(
          rejected.topicPartition().topic(),
          rejected.topicPartition().partition(),
          rejected.offset(),
          rejected.timestamp(),
          rejected.timestampType() == null
              ? TimestampType.NO_TIMESTAMP_TYPE
              : rejected.timestampType(),
          size(rejected.keyBuffer()),
          size(rejected.valueBuffer()),
          null,
          null,
          rejected.headers() == null
              ? new RecordHeaders()
              : new RecordHeaders(rejected.headers().toArray()),
          Optional.empty());
      this.rejected = rejected;
      this.lockEndsNanos = lockEndsNanos;
    }

    /** The deserializer's error. */
    RecordDeserializationException rejected() {
      return rejected;
    }

    /** The record as the broker holds it, its bytes as they were sent, to be dead-lettered. */
    ConsumerRecord<byte[], byte[]> raw() {
      return UndeserializableRecords.raw(rejected);
    }

    long lockEndsNanos() {
      return lockEndsNanos;
    }

    private static int size(@Nullable ByteBuffer bytes) {
      return bytes == null ? ConsumerRecord.NULL_SIZE : bytes.remaining();
    }
  }
}
