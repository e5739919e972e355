package io.consumerdedup.spring.internal;

import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.jspecify.annotations.Nullable;
import org.springframework.kafka.listener.BatchInterceptor;
import org.springframework.kafka.listener.ContainerProperties;

/**
 * Remembers, on the consumer thread, the batch a container is about to hand to its batch listener,
 * so that an {@code @Idempotent} batch listener taking {@code List<Message<?>>} reads each record's
 * headers, topic and offset: message {@code i} is record {@code i}; and the ack mode of the
 * container delivering it. Forgotten when the consumer thread clears its state after each poll.
 *
 * <p>In a Kafka transaction of the container, the claims of {@code @Idempotent} methods that a
 * batch listener calls with its records wait for the batch's transaction ({@link
 * ListenerOutcomes#deferToBatch}): spring-kafka tells this interceptor when the listener returned
 * or threw inside it ({@code success}, {@code failure}), its after-rollback processor a rollback,
 * and the end of the poll ({@code clearThreadState}) comes after the commit.
 */
public final class CurrentBatch implements BatchInterceptor<Object, Object> {

  /** An instance of no container, which knows no ack mode. */
  public static final CurrentBatch INSTANCE = new CurrentBatch(null);

  private static final ThreadLocal<@Nullable List<ConsumerRecord<Object, Object>>> CURRENT =
      new ThreadLocal<>();

  private static final ThreadLocal<ContainerProperties.@Nullable AckMode> ACK_MODE =
      new ThreadLocal<>();

  /** The properties of the container this instance is of; null for {@link #INSTANCE}. */
  private final @Nullable ContainerProperties container;

  private CurrentBatch(@Nullable ContainerProperties container) {
    this.container = container;
  }

  /** The records of the batch being delivered on this thread, or null. */
  public static @Nullable List<ConsumerRecord<Object, Object>> records() {
    return CURRENT.get();
  }

  /** The ack mode of the container delivering the batch on this thread, if known. */
  public static ContainerProperties.@Nullable AckMode ackMode() {
    return ACK_MODE.get();
  }

  /**
   * {@code existing} followed by this interceptor; this one alone if there is none; {@code
   * existing} itself if it already ends with this one.
   */
  public static BatchInterceptor<?, ?> after(@Nullable BatchInterceptor<?, ?> existing) {
    return after(existing, null);
  }

  /**
   * As {@link #after(BatchInterceptor)}, for the container of {@code container}, whose ack mode
   * {@link #ackMode()} tells while it delivers a batch.
   */
  @SuppressWarnings({"unchecked", "rawtypes"})
  public static BatchInterceptor<?, ?> after(
      @Nullable BatchInterceptor existing, @Nullable ContainerProperties container) {
    if (existing instanceof CurrentBatch || existing instanceof Chained) {
      return existing;
    }
    CurrentBatch current = container == null ? INSTANCE : new CurrentBatch(container);
    return existing == null ? current : new Chained(existing, current);
  }

  @Override
  public ConsumerRecords<Object, Object> intercept(
      ConsumerRecords<Object, Object> records, Consumer<Object, Object> consumer) {
    List<ConsumerRecord<Object, Object>> list = new ArrayList<>(records.count());
    records.forEach(list::add);
    CURRENT.set(list);
    if (container != null) {
      ACK_MODE.set(container.getAckMode());
    }
    return records;
  }

  /**
   * Whether {@code record} is one of the batch being delivered on this thread; that batch (the list
   * of {@link #records()}) if so, else null.
   */
  public static @Nullable List<?> batchOf(ConsumerRecord<?, ?> record) {
    List<ConsumerRecord<Object, Object>> batch = CURRENT.get();
    if (batch == null) {
      return null;
    }
    for (ConsumerRecord<?, ?> polled : batch) {
      if (polled.offset() == record.offset()
          && polled.partition() == record.partition()
          && polled.topic().equals(record.topic())) {
        return batch;
      }
    }
    return null;
  }

  /**
   * The listener returned (called inside the batch's transaction, if the container has one): the
   * claims of the {@code @Idempotent} methods it called wait for that transaction's end.
   */
  @Override
  public void success(ConsumerRecords<Object, Object> records, Consumer<Object, Object> consumer) {
    ListenerOutcomes.batchHandedOver();
  }

  /** The listener threw; the transaction's rollback, if it rolls back, is reported next. */
  @Override
  public void failure(
      ConsumerRecords<Object, Object> records,
      Exception exception,
      Consumer<Object, Object> consumer) {
    ListenerOutcomes.batchHandedOver();
  }

  @Override
  public void setupThreadState(Consumer<?, ?> consumer) {
    ThreadStateErrors.throwHeld(consumer);
  }

  /**
   * After the poll, its batch's transaction ended: the claims of the methods the listener called
   * are settled with it. An {@code Error} doing so is thrown before the next poll ({@link
   * ThreadStateErrors}): thrown here, from spring-kafka's {@code finally}, it ended the consumer
   * thread without closing the consumer.
   */
  @Override
  public void clearThreadState(Consumer<?, ?> consumer) {
    CURRENT.remove();
    ACK_MODE.remove();
    ThreadStateErrors.clearing(consumer, ListenerOutcomes::afterBatch);
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
    private final CurrentBatch current;

    Chained(BatchInterceptor<Object, Object> first, CurrentBatch current) {
      this.first = Objects.requireNonNull(first, "first");
      this.current = current;
    }

    @Override
    public @Nullable ConsumerRecords<Object, Object> intercept(
        ConsumerRecords<Object, Object> records, Consumer<Object, Object> consumer) {
      ConsumerRecords<Object, Object> intercepted = first.intercept(records, consumer);
      return intercepted == null ? null : current.intercept(intercepted, consumer);
    }

    @Override
    public void success(
        ConsumerRecords<Object, Object> records, Consumer<Object, Object> consumer) {
      try {
        first.success(records, consumer);
      } finally {
        current.success(records, consumer);
      }
    }

    @Override
    public void failure(
        ConsumerRecords<Object, Object> records,
        Exception exception,
        Consumer<Object, Object> consumer) {
      try {
        first.failure(records, exception, consumer);
      } finally {
        current.failure(records, exception, consumer);
      }
    }

    @Override
    public void setupThreadState(Consumer<?, ?> consumer) {
      try {
        first.setupThreadState(consumer);
      } finally {
        current.setupThreadState(consumer);
      }
    }

    @Override
    public void clearThreadState(Consumer<?, ?> consumer) {
      try {
        first.clearThreadState(consumer);
      } finally {
        current.clearThreadState(consumer);
      }
    }

    @Override
    public String toString() {
      return "CurrentBatch.Chained{" + first + "}";
    }
  }
}
