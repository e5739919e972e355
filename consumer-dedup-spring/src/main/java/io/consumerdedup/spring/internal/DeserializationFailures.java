package io.consumerdedup.spring.internal;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;
import org.springframework.core.log.LogAccessor;
import org.springframework.kafka.support.serializer.DeserializationException;
import org.springframework.kafka.support.serializer.SerializationUtils;

/**
 * What spring-kafka's {@code ErrorHandlingDeserializer} could not deserialize of a record: it puts
 * null in place of the key or value and the failure, with the bytes it was given, in a header
 * ({@link SerializationUtils#KEY_DESERIALIZER_EXCEPTION_HEADER}, {@link
 * SerializationUtils#VALUE_DESERIALIZER_EXCEPTION_HEADER}). A record container turns that header
 * into an exception for its error handler before any listener sees the record; a batch container
 * and spring-kafka 4.1's share container hand the record to the listener as it is, so
 * consumer-dedup reads the header itself for them.
 */
public final class DeserializationFailures {
  private static final LogAccessor log = new LogAccessor(DeserializationFailures.class);

  private DeserializationFailures() {}

  /**
   * Whether the record carries a failure header. One that a producer sent under that name is no
   * failure: {@link #key} and {@link #value} read it as none (spring-kafka logs a WARN).
   */
  public static boolean carriesOne(ConsumerRecord<?, ?> record) {
    return record.headers().lastHeader(SerializationUtils.KEY_DESERIALIZER_EXCEPTION_HEADER) != null
        || record.headers().lastHeader(SerializationUtils.VALUE_DESERIALIZER_EXCEPTION_HEADER)
            != null;
  }

  /** Why the record's key could not be deserialized, with its bytes; null if it could. */
  public static @Nullable DeserializationException key(ConsumerRecord<?, ?> record) {
    return SerializationUtils.getExceptionFromHeader(
        record, SerializationUtils.KEY_DESERIALIZER_EXCEPTION_HEADER, log);
  }

  /** Why the record's value could not be deserialized, with its bytes; null if it could. */
  public static @Nullable DeserializationException value(ConsumerRecord<?, ?> record) {
    return SerializationUtils.getExceptionFromHeader(
        record, SerializationUtils.VALUE_DESERIALIZER_EXCEPTION_HEADER, log);
  }

  /**
   * The first failure of the record (its key's, then its value's, as Kafka reads them); or null.
   */
  public static @Nullable DeserializationException first(ConsumerRecord<?, ?> record) {
    if (!carriesOne(record)) {
      return null;
    }
    DeserializationException key = key(record);
    return key != null ? key : value(record);
  }
}
