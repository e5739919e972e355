package io.consumerdedup.spring;

import java.util.Optional;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;
import org.springframework.kafka.config.AbstractKafkaListenerContainerFactory;
import org.springframework.kafka.listener.AbstractMessageListenerContainer;
import org.springframework.kafka.listener.CompositeRecordInterceptor;
import org.springframework.kafka.listener.RecordInterceptor;

/**
 * Remembers, on the consumer thread, the record the container is about to hand to the listener, so
 * that {@link IdempotentListenerInterceptor} reads the record's headers, topic and offset even when
 * the listener method takes only a converted payload. Stateless apart from the thread-local: one
 * instance serves every container.
 *
 * <p>Install it with {@link #addTo(AbstractKafkaListenerContainerFactory)} or {@link
 * #addTo(AbstractMessageListenerContainer)}, which compose it after any interceptor already set.
 */
public final class CurrentRecordInterceptor implements RecordInterceptor<Object, Object> {

  /** The one instance. */
  public static final CurrentRecordInterceptor INSTANCE = new CurrentRecordInterceptor();

  private static final ThreadLocal<@Nullable ConsumerRecord<?, ?>> CURRENT = new ThreadLocal<>();

  private CurrentRecordInterceptor() {}

  /** The record being delivered on this thread, if the container runs this interceptor. */
  public static Optional<ConsumerRecord<?, ?>> current() {
    return Optional.ofNullable(CURRENT.get());
  }

  @Override
  public ConsumerRecord<Object, Object> intercept(
      ConsumerRecord<Object, Object> record, Consumer<Object, Object> consumer) {
    CURRENT.set(record);
    return record;
  }

  @Override
  public void afterRecord(
      ConsumerRecord<Object, Object> record, Consumer<Object, Object> consumer) {
    CURRENT.remove();
  }

  @Override
  public void clearThreadState(Consumer<?, ?> consumer) {
    CURRENT.remove();
  }

  /**
   * Adds this interceptor to the factory's containers, after the factory's own interceptor (which
   * may replace the record; this one must see what the listener will get).
   */
  @SuppressWarnings({"unchecked", "rawtypes"})
  public static void addTo(AbstractKafkaListenerContainerFactory<?, ?, ?> factory) {
    AbstractKafkaListenerContainerFactory raw = factory;
    raw.setRecordInterceptor(composeWith(raw.getRecordInterceptor()));
  }

  /** Adds this interceptor to a container built by hand, after its own interceptor. */
  @SuppressWarnings({"unchecked", "rawtypes"})
  public static void addTo(AbstractMessageListenerContainer<?, ?> container) {
    AbstractMessageListenerContainer raw = container;
    raw.setRecordInterceptor(composeWith(raw.getRecordInterceptor()));
  }

  @SuppressWarnings({"unchecked", "rawtypes"})
  private static RecordInterceptor composeWith(@Nullable RecordInterceptor existing) {
    if (existing == null) {
      return INSTANCE;
    }
    if (existing == INSTANCE) {
      return existing;
    }
    // Composed twice it would only set the same thread-local twice: harmless.
    return new CompositeRecordInterceptor(existing, INSTANCE);
  }
}
