package io.consumerdedup.spring.listener;

import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.kafka.IdempotentRecordHandler;
import io.consumerdedup.kafka.KeyExtractors;
import io.consumerdedup.kafka.MissingKeyPolicy;
import io.consumerdedup.spring.DedupErrorClassification;
import java.util.Objects;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;
import org.springframework.kafka.listener.AbstractMessageListenerContainer;
import org.springframework.kafka.listener.AcknowledgingConsumerAwareMessageListener;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.GenericMessageListener;
import org.springframework.kafka.listener.ListenerType;
import org.springframework.kafka.listener.ListenerUtils;
import org.springframework.kafka.support.Acknowledgment;

/**
 * Makes a hand-built container's record listener idempotent, keyed by a header convention: the
 * business key is the header {@value #DEFAULT_KEY_HEADER} (or one you name), strictly decoded as
 * UTF-8. Each record runs through the core's {@link IdempotentRecordHandler}; the container's
 * record interceptor and transaction manager are left as they are, and its {@link
 * DefaultErrorHandler} keeps its settings and learns which dedup exceptions are not retryable.
 *
 * <pre>{@code
 * KafkaMessageListenerContainer<String, String> container = ...;   // listener already set
 * IdempotentMessageListener.decorate(container, executor, "payment");
 * container.start();
 * }</pre>
 *
 * <p>A duplicate is not passed to the listener; if the listener acknowledges records itself, the
 * duplicate is acknowledged here, so manual acknowledgment keeps moving.
 */
public final class IdempotentMessageListener<K, V>
    implements AcknowledgingConsumerAwareMessageListener<K, V> {

  /** The header that carries the business key by convention. */
  public static final String DEFAULT_KEY_HEADER = "dedup-key";

  private final GenericMessageListener<ConsumerRecord<K, V>> delegate;
  private final ListenerType delegateType;
  private final IdempotentExecutor executor;
  private final String bizType;
  private final String keyHeader;
  private final MissingKeyPolicy missingKeyPolicy;
  private final @Nullable String groupId;

  /**
   * @param delegate a record listener (any of spring-kafka's record listener interfaces)
   * @param groupId named in records and exceptions; null if unknown
   */
  public IdempotentMessageListener(
      GenericMessageListener<ConsumerRecord<K, V>> delegate,
      IdempotentExecutor executor,
      String bizType,
      String keyHeader,
      MissingKeyPolicy missingKeyPolicy,
      @Nullable String groupId) {
    this.delegate = Objects.requireNonNull(delegate, "delegate");
    this.delegateType = ListenerUtils.determineListenerType(delegate);
    this.executor = Objects.requireNonNull(executor, "executor");
    this.bizType = Objects.requireNonNull(bizType, "bizType");
    this.keyHeader = Objects.requireNonNull(keyHeader, "keyHeader");
    this.missingKeyPolicy = Objects.requireNonNull(missingKeyPolicy, "missingKeyPolicy");
    this.groupId = groupId;
    // Fail now, not at the first record, on a bad biz type.
    IdempotentRecordHandler.<K, V>builder(executor).bizType(bizType);
  }

  /**
   * Wraps the record listener of {@code container} (which must not be running), keyed by the
   * {@value #DEFAULT_KEY_HEADER} header, refusing records without it.
   */
  public static void decorate(
      AbstractMessageListenerContainer<?, ?> container,
      IdempotentExecutor executor,
      String bizType) {
    decorate(container, executor, bizType, DEFAULT_KEY_HEADER, MissingKeyPolicy.FAIL);
  }

  /**
   * Wraps the record listener of {@code container} (which must not be running), and adds
   * consumer-dedup's classifications to its {@link DefaultErrorHandler}, if it has one.
   */
  @SuppressWarnings({"unchecked", "rawtypes"})
  public static void decorate(
      AbstractMessageListenerContainer<?, ?> container,
      IdempotentExecutor executor,
      String bizType,
      String keyHeader,
      MissingKeyPolicy missingKeyPolicy) {
    if (container.isRunning()) {
      throw new IllegalStateException("Decorate the container's listener before starting it");
    }
    Object listener = container.getContainerProperties().getMessageListener();
    if (!(listener instanceof GenericMessageListener<?> generic)
        || listener instanceof org.springframework.kafka.listener.BatchMessageListener<?, ?>) {
      throw new IllegalArgumentException(
          "IdempotentMessageListener wraps record listeners; the container's listener is "
              + (listener == null ? "not set" : listener.getClass().getName()));
    }
    if (listener instanceof IdempotentMessageListener<?, ?>) {
      throw new IllegalStateException("The container's listener is already idempotent");
    }
    if (container.getCommonErrorHandler() instanceof DefaultErrorHandler errorHandler) {
      DedupErrorClassification.applyTo(errorHandler);
    }
    container.setupMessageListener(
        new IdempotentMessageListener(
            generic, executor, bizType, keyHeader, missingKeyPolicy, container.getGroupId()));
  }

  @Override
  public void onMessage(
      ConsumerRecord<K, V> record,
      @Nullable Acknowledgment acknowledgment,
      @Nullable Consumer<?, ?> consumer) {
    IdempotentRecordHandler.Builder<K, V> handler =
        IdempotentRecordHandler.<K, V>builder(executor)
            .bizType(bizType)
            .key(KeyExtractors.header(keyHeader))
            .missingKeyPolicy(missingKeyPolicy)
            .handler(r -> deliver(r, acknowledgment, consumer));
    if (groupId != null) {
      handler.groupId(groupId);
    }
    Outcome outcome = handler.build().handle(record);
    if (outcome == Outcome.DUPLICATE && acknowledgment != null && acknowledges()) {
      acknowledgment.acknowledge();
    }
  }

  private boolean acknowledges() {
    return delegateType == ListenerType.ACKNOWLEDGING
        || delegateType == ListenerType.ACKNOWLEDGING_CONSUMER_AWARE;
  }

  private void deliver(
      ConsumerRecord<K, V> record,
      @Nullable Acknowledgment acknowledgment,
      @Nullable Consumer<?, ?> consumer) {
    switch (delegateType) {
      case ACKNOWLEDGING_CONSUMER_AWARE -> delegate.onMessage(record, acknowledgment, consumer);
      case ACKNOWLEDGING -> delegate.onMessage(record, acknowledgment);
      case CONSUMER_AWARE -> delegate.onMessage(record, consumer);
      case SIMPLE -> delegate.onMessage(record);
    }
  }

  @Override
  public void onMessage(ConsumerRecord<K, V> record) {
    onMessage(record, null, null);
  }
}
