package io.consumerdedup.spring.internal;

import java.util.Objects;
import java.util.function.Predicate;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;
import org.springframework.kafka.listener.AcknowledgingConsumerAwareMessageListener;
import org.springframework.kafka.listener.GenericMessageListener;
import org.springframework.kafka.listener.ListenerType;
import org.springframework.kafka.listener.ListenerUtils;
import org.springframework.kafka.support.Acknowledgment;

/**
 * A container's own acknowledging listener, as consumer-dedup's record interceptor needs it in a
 * manual ack mode, where only the listener's {@link Acknowledgment} commits offsets: a duplicate
 * the interceptor let through is acknowledged instead of delivered (else its offset would never be
 * committed), and a nack leaves the record's key FAILED, so the redelivery it asks for runs the
 * listener again. What the listener acknowledges while it runs is passed on once it has returned,
 * and dropped if it throws: spring-kafka keeps such an acknowledgment, and commits it outside any
 * transaction before its next poll (in a Kafka transaction) or before its error handler seeks the
 * record back, past a record whose key is FAILED and that a stop or a rebalance before its retry
 * lost.
 */
public final class AcknowledgingListener<K, V>
    implements AcknowledgingConsumerAwareMessageListener<K, V> {
  private final GenericMessageListener<ConsumerRecord<K, V>> delegate;
  private final ListenerType type;
  private final Predicate<ConsumerRecord<K, V>> duplicate;

  /**
   * @param duplicate whether a record is a duplicate to acknowledge without delivering it (asked
   *     once per delivery)
   */
  public AcknowledgingListener(
      GenericMessageListener<ConsumerRecord<K, V>> delegate,
      Predicate<ConsumerRecord<K, V>> duplicate) {
    this.delegate = Objects.requireNonNull(delegate, "delegate");
    this.type = ListenerUtils.determineListenerType(delegate);
    this.duplicate = Objects.requireNonNull(duplicate, "duplicate");
  }

  @Override
  public void onMessage(
      ConsumerRecord<K, V> record,
      @Nullable Acknowledgment acknowledgment,
      @Nullable Consumer<?, ?> consumer) {
    if (duplicate.test(record)) {
      if (acknowledgment != null) {
        acknowledgment.acknowledge();
      }
      return;
    }
    HeldAcknowledgment seen =
        acknowledgment == null
            ? null
            : new HeldAcknowledgment(
                acknowledgment,
                cause -> ListenerOutcomes.rolledBack(record, cause),
                ListenerOutcomes.inKafkaTransaction() ? ListenerOutcomes.current(record) : null);
    switch (type) {
      case ACKNOWLEDGING_CONSUMER_AWARE -> delegate.onMessage(record, seen, consumer);
      case ACKNOWLEDGING -> delegate.onMessage(record, seen);
      case CONSUMER_AWARE -> delegate.onMessage(record, consumer);
      default -> delegate.onMessage(record);
    }
    if (seen != null) {
      // Before the acknowledgment is passed on: what that throws (a MANUAL_IMMEDIATE commit of a
      // consumer that has left its group) comes after the listener's effects were applied.
      ListenerOutcomes.listenerReturned(record);
      seen.release();
    }
  }

  @Override
  public void onMessage(ConsumerRecord<K, V> record) {
    onMessage(record, null, null);
  }
}
