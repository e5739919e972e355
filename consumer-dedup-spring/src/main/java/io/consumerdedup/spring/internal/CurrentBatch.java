package io.consumerdedup.spring.internal;

import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.jspecify.annotations.Nullable;
import org.springframework.kafka.listener.BatchInterceptor;

/**
 * Remembers, on the consumer thread, the batch a container is about to hand to its batch listener,
 * so that an {@code @Idempotent} batch listener taking {@code List<Message<?>>} reads each record's
 * headers, topic and offset: message {@code i} is record {@code i}. Forgotten when the consumer
 * thread clears its state after each poll.
 */
public final class CurrentBatch implements BatchInterceptor<Object, Object> {

  /** The one instance. */
  public static final CurrentBatch INSTANCE = new CurrentBatch();

  private static final ThreadLocal<@Nullable List<ConsumerRecord<Object, Object>>> CURRENT =
      new ThreadLocal<>();

  private CurrentBatch() {}

  /** The records of the batch being delivered on this thread, or null. */
  public static @Nullable List<ConsumerRecord<Object, Object>> records() {
    return CURRENT.get();
  }

  /**
   * {@code existing} followed by this interceptor; this one alone if there is none; {@code
   * existing} itself if it already ends with this one.
   */
  @SuppressWarnings({"unchecked", "rawtypes"})
  public static BatchInterceptor after(@Nullable BatchInterceptor existing) {
    if (existing == null) {
      return INSTANCE;
    }
    if (existing == INSTANCE || existing instanceof Chained) {
      return existing;
    }
    return new Chained(existing);
  }

  @Override
  public ConsumerRecords<Object, Object> intercept(
      ConsumerRecords<Object, Object> records, Consumer<Object, Object> consumer) {
    List<ConsumerRecord<Object, Object>> list = new ArrayList<>(records.count());
    records.forEach(list::add);
    CURRENT.set(list);
    return records;
  }

  @Override
  public void clearThreadState(Consumer<?, ?> consumer) {
    CURRENT.remove();
  }

  @Override
  public String toString() {
    return "CurrentBatch";
  }

  /**
   * The application's batch interceptor, then this one; the application's exceptions in {@code
   * success}, {@code failure} or the thread-state calls do not keep this one from being called.
   */
  private static final class Chained implements BatchInterceptor<Object, Object> {
    private final BatchInterceptor<Object, Object> first;

    Chained(BatchInterceptor<Object, Object> first) {
      this.first = Objects.requireNonNull(first, "first");
    }

    @Override
    public @Nullable ConsumerRecords<Object, Object> intercept(
        ConsumerRecords<Object, Object> records, Consumer<Object, Object> consumer) {
      ConsumerRecords<Object, Object> intercepted = first.intercept(records, consumer);
      return intercepted == null ? null : INSTANCE.intercept(intercepted, consumer);
    }

    @Override
    public void success(
        ConsumerRecords<Object, Object> records, Consumer<Object, Object> consumer) {
      first.success(records, consumer);
    }

    @Override
    public void failure(
        ConsumerRecords<Object, Object> records,
        Exception exception,
        Consumer<Object, Object> consumer) {
      first.failure(records, exception, consumer);
    }

    @Override
    public void setupThreadState(Consumer<?, ?> consumer) {
      first.setupThreadState(consumer);
    }

    @Override
    public void clearThreadState(Consumer<?, ?> consumer) {
      try {
        first.clearThreadState(consumer);
      } finally {
        INSTANCE.clearThreadState(consumer);
      }
    }

    @Override
    public String toString() {
      return "CurrentBatch.Chained{" + first + "}";
    }
  }
}
