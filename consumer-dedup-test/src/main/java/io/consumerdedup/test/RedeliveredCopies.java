package io.consumerdedup.test;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.jspecify.annotations.Nullable;

/**
 * What a redelivered copy is handed: a record as Kafka delivers it again, deserialized anew. Its
 * bytes (headers, a key or value of bytes) are new arrays with the first delivery's content, so a
 * handler that changed the first delivery's arrays (wiped card data once done with it, decoded in
 * place) does not hand the change to its copy, and a key taken from an array's identity rather than
 * its content changes between the deliveries, as it does in production.
 */
public final class RedeliveredCopies {

  private RedeliveredCopies() {}

  /**
   * The same record as a new object, its bytes new arrays. Taken before the first delivery runs, so
   * that the copy has the bytes as they came.
   */
  public static <K, V> ConsumerRecord<K, V> of(ConsumerRecord<K, V> record) {
    RecordHeaders headers = new RecordHeaders();
    for (Header header : record.headers()) {
      headers.add(new RecordHeader(header.key(), bytes(header.value())));
    }
    return new ConsumerRecord<>(
        record.topic(),
        record.partition(),
        record.offset(),
        record.timestamp(),
        record.timestampType(),
        record.serializedKeySize(),
        record.serializedValueSize(),
        bytes(record.key()),
        bytes(record.value()),
        headers,
        record.leaderEpoch());
  }

  /** A byte array as a new array of the same content; anything else as it is. */
  @SuppressWarnings("unchecked") // a byte[] is copied as a byte[]
  public static <T extends @Nullable Object> T bytes(T value) {
    return value instanceof byte[] array ? (T) array.clone() : value;
  }
}
