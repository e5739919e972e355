package io.consumerdedup.spring.internal;

import java.util.Collection;
import java.util.Objects;
import java.util.Optional;
import java.util.function.BooleanSupplier;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.kafka.listener.ConcurrentMessageListenerContainer;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.listener.RecordInterceptor;

/**
 * The container's side of {@link io.consumerdedup.spring.Idempotent} listeners, one instance for
 * each container ({@link io.consumerdedup.spring.DedupContainers#configure} adds it):
 *
 * <ul>
 *   <li>it remembers, on the consumer thread, the record the container is about to hand to the
 *       listener, so that {@link io.consumerdedup.spring.IdempotentListenerInterceptor} reads the
 *       record's headers, topic and offset even when the listener method takes only a converted
 *       payload;
 *   <li>when the container is done with a record, its transaction included ({@code afterRecord}),
 *       it writes the outcome a listener left to that moment (in a Kafka transaction);
 *   <li>once the listener has run inside the container's transaction ({@code success}, {@code
 *       failure}), no offset commit passes the record if that transaction does not commit ({@link
 *       PollAwareConsumer#handedOverInTransaction});
 *   <li>a claim still open when the next record arrives, or when the consumer thread clears its
 *       state (after each poll, when the container stops), is recorded FAILED, never left
 *       PROCESSING; an {@code Error} doing so is thrown before the next poll ({@link
 *       ThreadStateErrors}).
 * </ul>
 */
public final class CurrentRecordInterceptor implements RecordInterceptor<Object, Object> {
  private static final Logger log = LoggerFactory.getLogger(CurrentRecordInterceptor.class);

  /** The instance of no container: a share listener's, which delivers its records itself. */
  public static final CurrentRecordInterceptor INSTANCE =
      new CurrentRecordInterceptor(null, () -> false);

  /**
   * Clears the consumer thread's claims: the one the container never reported on is settled, then
   * (after each poll's records, and when the container stops) the claims of records the listener
   * never got (the poll cut short) are given back now, not at the next poll.
   */
  private static final EachRegardless.Step<Consumer<?, ?>, CurrentRecordInterceptor> CLEAR =
      (consumer, interceptor, step) -> {
        if (step == 0) {
          ListenerOutcomes.abandon();
        } else if (consumer instanceof PollAwareConsumer<?, ?> pollAware) {
          pollAware.poll().releaseClaims();
        }
      };

  private static final ThreadLocal<@Nullable ConsumerRecord<?, ?>> CURRENT = new ThreadLocal<>();

  /**
   * The poll of the consumer delivering {@link #CURRENT}, when it is a {@link PollAwareConsumer}.
   */
  private static final ThreadLocal<@Nullable ConsumerPoll> POLL = new ThreadLocal<>();

  /** The container delivering {@link #CURRENT}, if known. */
  private static final ThreadLocal<@Nullable MessageListenerContainer> CONTAINER =
      new ThreadLocal<>();

  private final @Nullable MessageListenerContainer container;

  /** Whether the container's consumers commit by themselves ({@code enable.auto.commit}). */
  private final BooleanSupplier autoCommits;

  /** {@link #autoCommits}, once asked at the first record (the container has started). */
  private volatile @Nullable Boolean consumersCommitThemselves;

  private CurrentRecordInterceptor(
      @Nullable MessageListenerContainer container, BooleanSupplier autoCommits) {
    this.container = container;
    this.autoCommits = autoCommits;
  }

  /**
   * The interceptor of {@code container}, which tells its listeners when it stops.
   *
   * @param autoCommits whether the container's consumers commit by themselves ({@code
   *     enable.auto.commit}): its listeners then claim record by record
   */
  public static CurrentRecordInterceptor of(
      MessageListenerContainer container, BooleanSupplier autoCommits) {
    return new CurrentRecordInterceptor(
        Objects.requireNonNull(container, "container"),
        Objects.requireNonNull(autoCommits, "autoCommits"));
  }

  /**
   * Whether the container delivering the current record on this thread (the child, for a concurrent
   * container) is stopping: spring-kafka neither wakes nor interrupts a consumer thread busy in a
   * listener, and waits for it to return.
   */
  public static boolean containerStopping() {
    MessageListenerContainer current = CONTAINER.get();
    return current != null && !current.isRunning();
  }

  /**
   * The ack mode of the container delivering the current record on this thread, if known (not for a
   * share listener, whose records are acknowledged by consumer-dedup).
   */
  public static ContainerProperties.@Nullable AckMode ackMode() {
    MessageListenerContainer current = CONTAINER.get();
    return current == null ? null : current.getContainerProperties().getAckMode();
  }

  /** The record being delivered on this thread, if the container runs this interceptor. */
  public static Optional<ConsumerRecord<?, ?>> current() {
    return Optional.ofNullable(CURRENT.get());
  }

  /**
   * The poll of the consumer that delivers {@code record} on this thread, if the container runs
   * this interceptor and its consumer is a {@link PollAwareConsumer}; else null.
   */
  public static @Nullable ConsumerPoll pollOf(ConsumerRecord<?, ?> record) {
    return isCurrent(record) ? POLL.get() : null;
  }

  /** Whether {@code record} is the one the container is delivering on this thread. */
  public static boolean isCurrent(ConsumerRecord<?, ?> record) {
    ConsumerRecord<?, ?> current = CURRENT.get();
    return current != null
        && current.offset() == record.offset()
        && current.partition() == record.partition()
        && current.topic().equals(record.topic());
  }

  /**
   * For a share listener called off its container's consumer thread ({@code DedupShareListener}'s
   * worker): {@code record} is delivered on this thread, as part of {@code batch} (a {@link
   * ConsumerPoll#ofShareBatch}; null to claim it alone), until {@link #afterRecord}.
   */
  public static void deliver(ConsumerRecord<?, ?> record, @Nullable ConsumerPoll batch) {
    ListenerOutcomes.abandonOtherThan(record);
    CURRENT.set(record);
    POLL.set(batch);
    CONTAINER.remove();
  }

  @Override
  public ConsumerRecord<Object, Object> intercept(
      ConsumerRecord<Object, Object> record, Consumer<Object, Object> consumer) {
    ListenerOutcomes.abandonOtherThan(record);
    CURRENT.set(record);
    CONTAINER.set(deliveringContainer(record));
    // The consumer the container delivers with, not whichever consumer polled last on this thread
    // (a listener may poll one of its own).
    POLL.set(
        consumer instanceof PollAwareConsumer<?, ?> pollAware && !consumersCommitThemselves()
            ? pollAware.poll()
            : null);
    return record;
  }

  /**
   * Whether the container's consumers commit by themselves: the Kafka client then commits their
   * positions from within its polls, past records whose SUCCESS marks, written in the background,
   * are not durable (or were refused by the database), and no commit of the container is there to
   * hold back. Its listeners claim record by record instead, writing SUCCESS before returning: a
   * SUCCESS not written is a failed call, whose record is sought back before the next poll commits.
   */
  private boolean consumersCommitThemselves() {
    Boolean known = consumersCommitThemselves;
    if (known == null) {
      known = autoCommits.getAsBoolean();
      consumersCommitThemselves = known;
      if (known) {
        log.info(
            "@Idempotent record listeners of container {} claim one record at a time: its"
                + " consumers commit by themselves (enable.auto.commit=true), so no commit can wait"
                + " for SUCCESS marks written in the background",
            container == null ? null : container.getListenerId());
      }
    }
    return known;
  }

  /**
   * The child of a concurrent container that delivers {@code record}, the one partition's consumer:
   * a child stopped on its own (by the application, or a fatal error) leaves its parent running, so
   * a wait that watched the parent outlasted the child's stop, for up to the async listener
   * timeout.
   */
  private @Nullable MessageListenerContainer deliveringContainer(ConsumerRecord<?, ?> record) {
    if (container instanceof ConcurrentMessageListenerContainer<?, ?> concurrent) {
      TopicPartition partition = new TopicPartition(record.topic(), record.partition());
      for (MessageListenerContainer child : concurrent.getContainers()) {
        Collection<TopicPartition> assigned = child.getAssignedPartitions();
        if (assigned != null && assigned.contains(partition)) {
          return child;
        }
      }
    }
    return container;
  }

  @Override
  public void success(ConsumerRecord<Object, Object> record, Consumer<Object, Object> consumer) {
    handedOver(record, consumer);
  }

  @Override
  public void failure(
      ConsumerRecord<Object, Object> record,
      Exception exception,
      Consumer<Object, Object> consumer) {
    handedOver(record, consumer);
  }

  /**
   * Runs inside the record's transaction, if the container has one: whether it commits decides
   * whether the offsets spring-kafka queued meanwhile may pass the record.
   */
  private static void handedOver(ConsumerRecord<?, ?> record, Consumer<?, ?> consumer) {
    if (consumer instanceof PollAwareConsumer<?, ?> pollAware) {
      pollAware.handedOverInTransaction(record);
    }
  }

  @Override
  public void afterRecord(
      ConsumerRecord<Object, Object> record, Consumer<Object, Object> consumer) {
    CURRENT.remove();
    POLL.remove();
    CONTAINER.remove();
    ListenerOutcomes.afterRecord(record);
  }

  @Override
  public void setupThreadState(Consumer<?, ?> consumer) {
    ThreadStateErrors.throwHeld(consumer);
  }

  @Override
  public void clearThreadState(Consumer<?, ?> consumer) {
    CURRENT.remove();
    POLL.remove();
    CONTAINER.remove();
    // Each step whatever the other threw: thrown from a finally, the second replaced the first
    // Error, which was then lost.
    ThreadStateErrors.clearing(consumer, () -> EachRegardless.run(consumer, this, 0, 2, CLEAR));
  }

  @Override
  public String toString() {
    return container == null
        ? "CurrentRecordInterceptor"
        : "CurrentRecordInterceptor{" + container.getListenerId() + "}";
  }
}
