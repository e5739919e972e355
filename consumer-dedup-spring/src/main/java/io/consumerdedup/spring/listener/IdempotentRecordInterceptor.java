package io.consumerdedup.spring.listener;

import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.kafka.IdempotentRecordHandler;
import io.consumerdedup.kafka.KeyExtractors;
import io.consumerdedup.kafka.MissingKeyPolicy;
import io.consumerdedup.kafka.RecordKeyResolver;
import io.consumerdedup.spring.DedupErrorClassification;
import java.util.Objects;
import java.util.Optional;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;
import org.springframework.kafka.listener.AbstractMessageListenerContainer;
import org.springframework.kafka.listener.BatchMessageListener;
import org.springframework.kafka.listener.CompositeRecordInterceptor;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.ListenerExecutionFailedException;
import org.springframework.kafka.listener.RecordInterceptor;

/**
 * The container-level alternative to {@code @Idempotent}, for containers built by hand: a {@link
 * RecordInterceptor} keyed by a header convention (the business key is the header {@value
 * #DEFAULT_KEY_HEADER}, or one you name, strictly decoded as UTF-8).
 *
 * <ul>
 *   <li>{@code intercept} claims the key through the core's {@link IdempotentExecutor}: a key that
 *       already succeeded returns {@code null}, so the container skips the listener and commits the
 *       record; a live lease elsewhere, a missing or malformed key and a conflict are thrown, and
 *       the container's error handler treats them as it treats a listener's exception;
 *   <li>{@code success} records SUCCESS, {@code failure} records FAILED, so the container's retry
 *       of the record runs the listener again.
 * </ul>
 *
 * <pre>{@code
 * KafkaMessageListenerContainer<String, String> container = ...;   // listener already set
 * IdempotentRecordInterceptor.decorate(container, executor, "payment");
 * container.start();
 * }</pre>
 *
 * <p>{@link #decorate} composes with the container's record interceptor (yours runs first) and adds
 * the dedup classifications to its {@link DefaultErrorHandler}; it replaces nothing.
 */
public final class IdempotentRecordInterceptor<K, V> implements RecordInterceptor<K, V> {

  /** The header that carries the business key by convention. */
  public static final String DEFAULT_KEY_HEADER = "dedup-key";

  private final IdempotentExecutor executor;
  private final RecordKeyResolver<K, V> keys;
  // The container calls intercept, then success or failure, on its consumer thread, one record at
  // a time: the claim in between belongs to that thread.
  private final ThreadLocal<@Nullable Held> held = new ThreadLocal<>();

  private record Held(ConsumerRecord<?, ?> record, DedupClaim claim) {}

  /**
   * @param groupId named in records and exceptions; null if unknown
   */
  public IdempotentRecordInterceptor(
      IdempotentExecutor executor,
      String bizType,
      String keyHeader,
      MissingKeyPolicy missingKeyPolicy,
      @Nullable String groupId) {
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
   * container's own one ({@link CompositeRecordInterceptor}) and the dedup classifications to its
   * {@link DefaultErrorHandler}, if it has one.
   *
   * <p>A container with a transaction manager is switched to intercept inside the transaction
   * ({@code setInterceptBeforeTx(false)}), so that a refused claim reaches the error handler and a
   * {@code TRANSACTIONAL} executor's claim joins the transaction; its own interceptor then runs
   * inside the transaction too.
   *
   * @throws IllegalStateException the container is running
   * @throws IllegalArgumentException the container has a batch listener (record interceptors do not
   *     see batches)
   */
  public static <K, V> IdempotentRecordInterceptor<K, V> decorate(
      AbstractMessageListenerContainer<K, V> container,
      IdempotentExecutor executor,
      String bizType,
      String keyHeader,
      MissingKeyPolicy missingKeyPolicy) {
    if (container.isRunning()) {
      throw new IllegalStateException("Decorate the container before starting it");
    }
    if (container.getContainerProperties().getMessageListener() instanceof BatchMessageListener) {
      throw new IllegalArgumentException(
          "IdempotentRecordInterceptor makes record listeners idempotent; this container has a"
              + " batch listener");
    }
    if (container.getContainerProperties().getTransactionManager() != null) {
      // Before the transaction, a refused claim would escape the error handler, and a
      // TRANSACTIONAL claim could not join the transaction.
      container.setInterceptBeforeTx(false);
    }
    IdempotentRecordInterceptor<K, V> interceptor =
        new IdempotentRecordInterceptor<>(
            executor, bizType, keyHeader, missingKeyPolicy, container.getGroupId());
    RecordInterceptor<K, V> existing = container.getRecordInterceptor();
    container.setRecordInterceptor(
        existing == null ? interceptor : new CompositeRecordInterceptor<>(existing, interceptor));
    if (container.getCommonErrorHandler() instanceof DefaultErrorHandler errorHandler) {
      DedupErrorClassification.applyTo(errorHandler);
    }
    return interceptor;
  }

  @Override
  public @Nullable ConsumerRecord<K, V> intercept(
      ConsumerRecord<K, V> record, Consumer<K, V> consumer) {
    held.remove();
    Optional<DedupKey> key = keys.resolve(record);
    if (key.isEmpty()) {
      return record; // no key, and the policy says to process it without dedup
    }
    DedupClaim claim = executor.claim(key.get(), null, keys.source(record));
    if (claim.isDuplicate()) {
      return null;
    }
    held.set(new Held(record, claim));
    return record;
  }

  @Override
  public void success(ConsumerRecord<K, V> record, Consumer<K, V> consumer) {
    DedupClaim claim = take(record);
    if (claim != null) {
      claim.complete();
    }
  }

  @Override
  public void failure(ConsumerRecord<K, V> record, Exception exception, Consumer<K, V> consumer) {
    DedupClaim claim = take(record);
    if (claim != null) {
      // The container hands over its wrapper; last_error should name what the listener threw.
      Throwable cause = exception.getCause();
      claim.fail(
          exception instanceof ListenerExecutionFailedException && cause != null
              ? cause
              : exception);
    }
  }

  @Override
  public void afterRecord(ConsumerRecord<K, V> record, Consumer<K, V> consumer) {
    held.remove();
  }

  /** The claim made for {@code record} on this thread, if any; it is handed out once. */
  private @Nullable DedupClaim take(ConsumerRecord<K, V> record) {
    Held current = held.get();
    held.remove();
    // Compared by coordinates: an interceptor before this one may have handed on a copy.
    return current != null && sameDelivery(current.record(), record) ? current.claim() : null;
  }

  private static boolean sameDelivery(ConsumerRecord<?, ?> a, ConsumerRecord<?, ?> b) {
    return a.offset() == b.offset()
        && a.partition() == b.partition()
        && a.topic().equals(b.topic());
  }
}
