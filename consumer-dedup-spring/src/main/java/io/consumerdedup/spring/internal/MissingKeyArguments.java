package io.consumerdedup.spring.internal;

import io.consumerdedup.core.DedupKeyMissingException;
import io.consumerdedup.kafka.internal.RecordSources;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;
import org.springframework.messaging.MessageHandlingException;

/**
 * A listener that takes its key header as a {@code @Header} argument, say {@code charge(String
 * amount, @Header("order-no") String orderNo)}, fails on a record without that header while
 * spring-messaging resolves its arguments, before consumer-dedup sees the call: spring-kafka would
 * retry that failure like any other. This turns it into what it is, a {@link
 * DedupKeyMissingException} naming the header, refused once (dead-lettered) like every other record
 * without a key.
 */
public final class MissingKeyArguments {
  private static final MissingKeyArguments NONE = new MissingKeyArguments(Set.of());

  private final Set<String> keyHeaders;

  /**
   * @param keyHeaders the key headers that {@code @Idempotent} listeners also take as arguments
   */
  public MissingKeyArguments(Set<String> keyHeaders) {
    this.keyHeaders = Set.copyOf(keyHeaders);
  }

  /** Translates nothing. */
  public static MissingKeyArguments none() {
    return NONE;
  }

  /**
   * {@code error}, or a {@link DedupKeyMissingException} in its place when it is a key header that
   * {@code record} lacks and that a listener's argument resolution missed.
   */
  public Exception translate(
      Exception error, ConsumerRecord<?, ?> record, @Nullable String groupId) {
    if (keyHeaders.isEmpty()) {
      return error;
    }
    for (Throwable current = error; current != null; current = current.getCause()) {
      if (current instanceof MessageHandlingException handling && handling.getMessage() != null) {
        for (String header : keyHeaders) {
          if (handling.getMessage().contains("Missing header '" + header + "'")
              && record.headers().lastHeader(header) == null) {
            return new DedupKeyMissingException(
                "Record has no business key: header '"
                    + header
                    + "' is absent (the listener also takes it as an argument, so spring-kafka"
                    + " could not call it)",
                RecordSources.describe(record, groupId),
                error);
          }
        }
      }
    }
    return error;
  }
}
