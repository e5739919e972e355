package io.consumerdedup.spring;

import java.util.function.Function;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.springframework.kafka.listener.RecordInterceptor;

/**
 * How often the container delivered each record, retries included, counted by what {@code by} says
 * of it (its offset, topic or key header). A record interceptor: as a bean, Boot's container
 * factory uses it, and consumer-dedup's record interceptor composes with it.
 */
final class DeliveryCounter<T> implements RecordInterceptor<Object, Object> {
  private final Counts<T> counts = new Counts<>();
  private final Function<ConsumerRecord<Object, Object>, T> by;

  DeliveryCounter(Function<ConsumerRecord<Object, Object>, T> by) {
    this.by = by;
  }

  @Override
  public ConsumerRecord<Object, Object> intercept(
      ConsumerRecord<Object, Object> record, Consumer<Object, Object> consumer) {
    counts.count(by.apply(record));
    return record;
  }

  /** The deliveries counted for {@code value}; 0 if none. */
  int of(T value) {
    return counts.of(value);
  }
}
