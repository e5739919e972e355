package io.consumerdedup.spring.listener;

import io.consumerdedup.core.DedupAttemptsExhaustedException;
import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.kafka.IdempotentRecordHandler;
import io.consumerdedup.kafka.KeyExtractors;
import io.consumerdedup.kafka.MissingKeyPolicy;
import io.consumerdedup.kafka.internal.RecordKeyResolver;
import io.consumerdedup.spring.DedupContainers;
import io.consumerdedup.spring.IdempotentListenerInterceptor;
import io.consumerdedup.spring.internal.AbortedTransactionCheck;
import io.consumerdedup.spring.internal.AcknowledgingListener;
import io.consumerdedup.spring.internal.AttemptLimit;
import io.consumerdedup.spring.internal.ContainerTransactions;
import io.consumerdedup.spring.internal.GuardedRecordInterceptor;
import io.consumerdedup.spring.internal.ListenerOutcomes;
import io.consumerdedup.spring.internal.ThreadStateErrors;
import java.util.Objects;
import java.util.Optional;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;
import org.springframework.jdbc.datasource.ConnectionHolder;
import org.springframework.kafka.listener.AbstractMessageListenerContainer;
import org.springframework.kafka.listener.BatchMessageListener;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.GenericMessageListener;
import org.springframework.kafka.listener.ListenerExecutionFailedException;
import org.springframework.kafka.listener.RecordInterceptor;
import org.springframework.kafka.listener.adapter.AsyncRepliesAware;
import org.springframework.transaction.support.TransactionSynchronizationManager;

/**
 * The container-level alternative to {@code @Idempotent}, for containers built by hand: a {@link
 * RecordInterceptor} keyed by a header convention (the business key is the header {@value
 * #DEFAULT_KEY_HEADER}, or one you name, strictly decoded as UTF-8).
 *
 * <ul>
 *   <li>{@code intercept} claims the key through the core's {@link IdempotentExecutor}: a key that
 *       already succeeded returns {@code null}, so the container skips the listener and commits the
 *       record; a live lease elsewhere, an unreachable store, a missing or malformed key and a
 *       conflict are thrown, and the container's error handler treats them by their {@link
 *       io.consumerdedup.core.Disposition} (held, or dead-lettered at once);
 *   <li>{@code success} and {@code failure} note what the listener did; the outcome (SUCCESS or
 *       FAILED) is written in {@code afterRecord}, once the container is done with the record, its
 *       transaction included, so a transaction that rolls back leaves the key retryable;
 *   <li>a claim the container never reports on (an {@code Error} in the listener or in an
 *       interceptor, the consumer stopped) is settled at the next record or when the consumer
 *       thread clears its state, never left PROCESSING: SUCCESS if the listener returned and the
 *       container has no transaction (its effects are committed), else FAILED;
 *   <li>a key that already failed {@code maxAttempts} times, as the dedup table counts them, is not
 *       run again: {@code intercept} gives its claim back and throws {@link
 *       DedupAttemptsExhaustedException}, which the error handler hands to its recoverer at once.
 *   <li>in a manual ack mode, the container's listener is wrapped so that a duplicate is
 *       acknowledged (otherwise its offset would never be committed) and a nack leaves the key
 *       FAILED, so the redelivery it asks for runs the listener again.
 * </ul>
 *
 * <pre>{@code
 * KafkaMessageListenerContainer<String, String> container = ...;   // listener already set
 * IdempotentRecordInterceptor.decorate(container, executor, "payment");
 * container.start();
 * }</pre>
 *
 * <p>{@link #decorate} composes with the container's record interceptor (yours runs first) and
 * prepares the container with {@link DedupContainers#configure}; it replaces nothing. Without a
 * transaction the container acknowledges a record before its interceptors hear of the outcome, so a
 * SUCCESS that cannot be written then is kept by the engine and written once the database answers,
 * while the record is already committed (the {@code @Idempotent} listeners do not have this window:
 * they write SUCCESS before returning to the container).
 */
public final class IdempotentRecordInterceptor<K, V> implements RecordInterceptor<K, V> {

  /** The header that carries the business key by convention. */
  public static final String DEFAULT_KEY_HEADER = "dedup-key";

  private final IdempotentExecutor executor;
  private final RecordKeyResolver<K, V> keys;
  private final AttemptLimit attempts;

  /**
   * In a manual ack mode a duplicate is let through to the container's listener, marked here, so
   * that {@link AcknowledgingListener} acknowledges it: returning null would skip it
   * unacknowledged.
   */
  private final ThreadLocal<@Nullable ConsumerRecord<?, ?>> duplicateToAcknowledge =
      new ThreadLocal<>();

  private volatile boolean acknowledgeDuplicates;

  /**
   * An interceptor allowing {@link IdempotentListenerInterceptor#DEFAULT_MAX_ATTEMPTS} attempts per
   * key.
   *
   * @param groupId named in records and exceptions; null if unknown
   */
  public IdempotentRecordInterceptor(
      IdempotentExecutor executor,
      String bizType,
      String keyHeader,
      MissingKeyPolicy missingKeyPolicy,
      @Nullable String groupId) {
    this(
        executor,
        bizType,
        keyHeader,
        missingKeyPolicy,
        IdempotentListenerInterceptor.DEFAULT_MAX_ATTEMPTS,
        groupId);
  }

  /**
   * @param maxAttempts how many times the listener runs for one key, counted in the dedup table,
   *     before its record is given up
   * @param groupId named in records and exceptions; null if unknown
   * @throws IllegalArgumentException if {@code maxAttempts} is less than 1
   */
  public IdempotentRecordInterceptor(
      IdempotentExecutor executor,
      String bizType,
      String keyHeader,
      MissingKeyPolicy missingKeyPolicy,
      int maxAttempts,
      @Nullable String groupId) {
    this.attempts = new AttemptLimit(maxAttempts);
    this.executor = Objects.requireNonNull(executor, "executor");
    this.keys =
        new RecordKeyResolver<>(
            bizType,
            KeyExtractors.header(keyHeader),
            missingKeyPolicy,
            groupId,
            executor.listener());
  }

  /**
   * Makes the record listener of {@code container} (which must not be running) idempotent, keyed by
   * the {@value #DEFAULT_KEY_HEADER} header, refusing records without it.
   */
  public static <K, V> IdempotentRecordInterceptor<K, V> decorate(
      AbstractMessageListenerContainer<K, V> container,
      IdempotentExecutor executor,
      String bizType) {
    return decorate(
        container,
        executor,
        bizType,
        DEFAULT_KEY_HEADER,
        IdempotentRecordHandler.DEFAULT_MISSING_KEY_POLICY);
  }

  /**
   * Makes the record listener of {@code container} idempotent: adds the interceptor after the
   * container's own one and prepares the container with {@link DedupContainers#configure}.
   *
   * <p>A container with a transaction manager is switched to intercept inside the transaction
   * ({@code setInterceptBeforeTx(false)}), so that a refused claim reaches the error handler and a
   * {@code TRANSACTIONAL} executor's claim joins the transaction; its own interceptor then runs
   * inside the transaction too.
   *
   * @throws IllegalStateException the container is running
   * @throws IllegalArgumentException the container has a batch listener (record interceptors do not
   *     see batches), or an async one (a future or Mono returned, or {@code asyncAcks}), which
   *     would be recorded SUCCESS before its work is done
   */
  public static <K, V> IdempotentRecordInterceptor<K, V> decorate(
      AbstractMessageListenerContainer<K, V> container,
      IdempotentExecutor executor,
      String bizType,
      String keyHeader,
      MissingKeyPolicy missingKeyPolicy) {
    return decorate(
        container,
        executor,
        bizType,
        keyHeader,
        missingKeyPolicy,
        IdempotentListenerInterceptor.DEFAULT_MAX_ATTEMPTS);
  }

  /**
   * As {@link #decorate(AbstractMessageListenerContainer, IdempotentExecutor, String, String,
   * MissingKeyPolicy)}, with the number of times the listener runs for one key, counted in the
   * dedup table, before its record is given up.
   *
   * @throws IllegalArgumentException if {@code maxAttempts} is less than 1, or as the other form
   */
  public static <K, V> IdempotentRecordInterceptor<K, V> decorate(
      AbstractMessageListenerContainer<K, V> container,
      IdempotentExecutor executor,
      String bizType,
      String keyHeader,
      MissingKeyPolicy missingKeyPolicy,
      int maxAttempts) {
    if (container.isRunning()) {
      throw new IllegalStateException("Decorate the container before starting it");
    }
    if (container.getContainerProperties().getMessageListener() instanceof BatchMessageListener) {
      throw new IllegalArgumentException(
          "IdempotentRecordInterceptor makes record listeners idempotent; this container has a"
              + " batch listener");
    }
    refuseAsyncListener(container);
    if (ContainerTransactions.any(container.getContainerProperties())) {
      // Before the transaction, a refused claim would escape the error handler, and a
      // TRANSACTIONAL claim could not join the transaction.
      container.setInterceptBeforeTx(false);
    }
    IdempotentRecordInterceptor<K, V> interceptor =
        new IdempotentRecordInterceptor<>(
            executor, bizType, keyHeader, missingKeyPolicy, maxAttempts, container.getGroupId());
    RecordInterceptor<K, V> existing = container.getRecordInterceptor();
    container.setRecordInterceptor(
        existing == null ? interceptor : new GuardedRecordInterceptor<>(existing, interceptor));
    ContainerProperties properties = container.getContainerProperties();
    if (properties.getAckMode() == ContainerProperties.AckMode.MANUAL
        || properties.getAckMode() == ContainerProperties.AckMode.MANUAL_IMMEDIATE) {
      @SuppressWarnings("unchecked")
      GenericMessageListener<ConsumerRecord<K, V>> listener =
          (GenericMessageListener<ConsumerRecord<K, V>>)
              Objects.requireNonNull(
                  properties.getMessageListener(),
                  "the container's message listener, which a manual ack mode needs");
      properties.setMessageListener(
          new AcknowledgingListener<>(listener, interceptor::takeDuplicate));
      interceptor.acknowledgeDuplicates = true;
    }
    DedupContainers.configure(container);
    return interceptor;
  }

  /**
   * An async listener (returning a future or Mono, or acknowledging after it returns with {@code
   * asyncAcks}) is done after the container's record interceptors hear it returned, so SUCCESS
   * would be written before its work, and spring-kafka acknowledges a future that fails.
   */
  private static void refuseAsyncListener(AbstractMessageListenerContainer<?, ?> container) {
    ContainerProperties properties = container.getContainerProperties();
    boolean asyncReplies =
        properties.getMessageListener() instanceof AsyncRepliesAware listener
            && listener.isAsyncReplies();
    if (asyncReplies || properties.isAsyncAcks()) {
      throw new IllegalArgumentException(
          "IdempotentRecordInterceptor cannot protect container "
              + container.getListenerId()
              + ": its listener "
              + (asyncReplies
                  ? "returns a CompletableFuture or Mono"
                  : "acknowledges with asyncAcks")
              + ", so it finishes after the record interceptor hears it returned, and SUCCESS would"
              + " be written before its work is done. Annotate the listener method @Idempotent"
              + " (which waits for its future), or make the listener synchronous");
    }
  }

  @Override
  public @Nullable ConsumerRecord<K, V> intercept(
      ConsumerRecord<K, V> record, Consumer<K, V> consumer) {
    ListenerOutcomes.abandonOtherThan(record);
    Optional<DedupKey> key = keys.resolve(record);
    if (key.isEmpty()) {
      return record; // no key, and the policy says to process it without dedup
    }
    String source = keys.source(record);
    if (executor.mode() == DedupMode.TRANSACTIONAL && !inDatabaseTransaction()) {
      throw new DedupConfigurationException(
          "IdempotentRecordInterceptor's executor uses mode TRANSACTIONAL but no database"
              + " transaction is active: give the container a DataSourceTransactionManager on the"
              + " dedup table's DataSource; the record waits until then",
          key.get(),
          source);
    }
    if (executor.mode() == DedupMode.TRANSACTIONAL) {
      AbortedTransactionCheck.register();
    }
    DedupClaim claim = executor.claim(key.get(), null, source);
    DedupAttemptsExhaustedException exhausted = attempts.beyondLimit(claim, executor);
    if (exhausted != null) {
      throw exhausted;
    }
    if (claim.isDuplicate()) {
      if (!acknowledgeDuplicates) {
        return null; // the container skips it and commits its offset
      }
      duplicateToAcknowledge.set(record);
      return record;
    }
    ListenerOutcomes.deferToContainer(ListenerOutcomes.pending(record, claim, attempts));
    return record;
  }

  /** Whether {@code record} is a duplicate let through to be acknowledged; asked once. */
  private boolean takeDuplicate(ConsumerRecord<K, V> record) {
    ConsumerRecord<?, ?> marked = duplicateToAcknowledge.get();
    duplicateToAcknowledge.remove();
    return marked != null
        && marked.offset() == record.offset()
        && marked.partition() == record.partition()
        && marked.topic().equals(record.topic());
  }

  private static boolean inDatabaseTransaction() {
    return TransactionSynchronizationManager.getResourceMap().values().stream()
        .anyMatch(ConnectionHolder.class::isInstance);
  }

  @Override
  public void success(ConsumerRecord<K, V> record, Consumer<K, V> consumer) {
    ListenerOutcomes.Pending pending = ListenerOutcomes.current(record);
    if (pending != null) {
      pending.listenerSucceeded();
    }
  }

  @Override
  public void failure(ConsumerRecord<K, V> record, Exception exception, Consumer<K, V> consumer) {
    ListenerOutcomes.Pending pending = ListenerOutcomes.current(record);
    if (pending != null) {
      // The container hands over its wrapper; last_error should name what the listener threw.
      Throwable cause = exception.getCause();
      pending.listenerFailed(
          exception instanceof ListenerExecutionFailedException && cause != null
              ? cause
              : exception);
    }
  }

  @Override
  public void afterRecord(ConsumerRecord<K, V> record, Consumer<K, V> consumer) {
    ListenerOutcomes.afterRecord(record);
  }

  @Override
  public void setupThreadState(Consumer<?, ?> consumer) {
    ThreadStateErrors.throwHeld(consumer);
  }

  @Override
  public void clearThreadState(Consumer<?, ?> consumer) {
    duplicateToAcknowledge.remove();
    ThreadStateErrors.clearing(consumer, ListenerOutcomes::abandon);
  }
}
