package io.consumerdedup.spring.internal;

import io.consumerdedup.core.DedupKeyMissingException;
import io.consumerdedup.kafka.internal.RecordSources;
import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;
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
 *
 * <p>Only that: the header's name must match exactly, and the method that could not be called must
 * be an {@code @Idempotent} listener keyed by it. Any other listener's missing {@code @Header}
 * keeps spring-kafka's handling (retries, then the recoverer).
 */
public final class MissingKeyArguments {
  /**
   * Key header to the listeners keyed by it (their {@code Method.toGenericString()}); none: any
   * listener of the container.
   */
  private final Map<String, Set<String>> listenersByHeader;

  /**
   * For a container whose listeners are all keyed by these headers (a container configured by hand,
   * whose owner names them).
   */
  public MissingKeyArguments(Set<String> keyHeaders) {
    this(keyHeaders.stream().collect(Collectors.toMap(header -> header, header -> Set.of())));
  }

  private MissingKeyArguments(Map<String, Set<String>> listenersByHeader) {
    this.listenersByHeader = Map.copyOf(listenersByHeader);
  }

  /**
   * @param listenersByHeader key header to the {@code Method.toGenericString()} of each {@code
   *     Idempotent} listener that is keyed by it and takes it as an argument
   */
  public static MissingKeyArguments forListeners(Map<String, Set<String>> listenersByHeader) {
    return new MissingKeyArguments(listenersByHeader);
  }

  /**
   * {@code error}, or a {@link DedupKeyMissingException} in its place when it is a key header that
   * {@code record} lacks and that a listener's argument resolution missed.
   */
  public Exception translate(
      Exception error, ConsumerRecord<?, ?> record, @Nullable String groupId) {
    if (listenersByHeader.isEmpty()) {
      return error;
    }
    for (Throwable current = error; current != null; current = current.getCause()) {
      if (current instanceof MessageHandlingException handling && handling.getMessage() != null) {
        for (Map.Entry<String, Set<String>> entry : listenersByHeader.entrySet()) {
          String header = entry.getKey();
          if (handling.getMessage().startsWith("Missing header '" + header + "'")
              && record.headers().lastHeader(header) == null
              && failedToCallOneOf(entry.getValue(), error)) {
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

  /**
   * Whether the method spring-kafka could not call is one of {@code listeners}: its {@code
   * ListenerExecutionFailedException} names it ("Endpoint handler details: Method [...]"), the only
   * place that does.
   */
  private static boolean failedToCallOneOf(Set<String> listeners, Throwable error) {
    if (listeners.isEmpty()) {
      return true;
    }
    for (Throwable current = error; current != null; current = current.getCause()) {
      String message = current.getMessage();
      if (message != null
          && listeners.stream().anyMatch(method -> message.contains("Method [" + method + "]"))) {
        return true;
      }
    }
    return false;
  }
}
