package io.consumerdedup.spring.internal;

import java.lang.reflect.Proxy;
import java.util.List;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.springframework.core.log.LogAccessor;
import org.springframework.kafka.KafkaException;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.listener.SeekUtils;

/**
 * spring-kafka's own "record in retry" exception for records sought back already: only on that one
 * does a container forget the offsets it waits to be acknowledged out of order (a listener
 * returning a future or Mono, or {@code asyncAcks}). On any other it pauses the whole consumer for
 * the records that were never acknowledged, and they never come again. The exception's class is not
 * public, so it is obtained from {@link SeekUtils#seekOrRecover}, given a consumer whose seeks do
 * nothing: the caller has made them.
 */
public final class RecordsInRetry {
  private static final LogAccessor SEEK_LOG = new LogAccessor(RecordsInRetry.class);

  private static final Consumer<?, ?> NO_SEEKS =
      (Consumer<?, ?>)
          Proxy.newProxyInstance(
              Consumer.class.getClassLoader(),
              new Class<?>[] {Consumer.class},
              (proxy, method, args) -> {
                if (method.getName().equals("seek")) {
                  return null;
                }
                throw new UnsupportedOperationException(method.getName());
              });

  private RecordsInRetry() {}

  /** {@code exception} as spring-kafka's record in retry, with {@code exception} as its cause. */
  @SuppressWarnings({"unchecked", "rawtypes"})
  public static RuntimeException of(
      KafkaException exception,
      List<ConsumerRecord<?, ?>> records,
      MessageListenerContainer container) {
    try {
      SeekUtils.seekOrRecover(
          exception,
          records,
          (Consumer) NO_SEEKS,
          container,
          false,
          (record, e) -> false,
          SEEK_LOG,
          KafkaException.Level.DEBUG);
    } catch (RuntimeException inRetry) {
      return inRetry;
    }
    return exception;
  }
}
