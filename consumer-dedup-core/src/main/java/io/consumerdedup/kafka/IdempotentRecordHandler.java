package io.consumerdedup.kafka;

import io.consumerdedup.core.DedupHandlerException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupKeyMalformedException;
import io.consumerdedup.core.DedupKeyMissingException;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.kafka.internal.RecordKeyResolver;
import java.util.Objects;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.function.Function;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;

/**
 * Makes a plain kafka-clients record handler idempotent: derives the record's business key, and
 * runs the handler through the {@link IdempotentExecutor}, so each business action is applied once
 * however often Kafka delivers it.
 *
 * <pre>{@code
 * IdempotentRecordHandler<String, String> payments = IdempotentRecordHandler
 *     .<String, String>builder(executor)
 *     .bizType("payment")
 *     .key(KeyExtractors.header("order-no"))
 *     .handler(record -> charge(record.value()))
 *     .build();
 * Outcome outcome = payments.handle(record);   // PROCESSED or DUPLICATE
 * }</pre>
 *
 * <p>{@link #handle(ConsumerRecord)} throws what the executor throws (see {@link
 * IdempotentExecutor#execute}); {@link DedupPollLoop} shows what to do with each. As a {@link
 * RecordProcessor} it also tells the loop how often a record's action was attempted, from the dedup
 * table, so the count survives restarts and moves between consumers.
 */
public final class IdempotentRecordHandler<K, V> implements RecordProcessor<K, V> {

  /** Default policy for records without a key: refuse them. */
  public static final MissingKeyPolicy DEFAULT_MISSING_KEY_POLICY = MissingKeyPolicy.FAIL;

  private final IdempotentExecutor executor;
  private final RecordKeyResolver<K, V> keys;
  private final RecordHandler<K, V> handler;
  private final @Nullable Function<ConsumerRecord<K, V>, String> fingerprint;

  private IdempotentRecordHandler(Builder<K, V> builder) {
    this.executor = builder.executor;
    this.keys =
        new RecordKeyResolver<>(
            Objects.requireNonNull(builder.bizType, "bizType is required"),
            Objects.requireNonNull(builder.keyExtractor, "key extractor is required"),
            builder.missingKeyPolicy,
            builder.groupId,
            executor.listener());
    this.handler = Objects.requireNonNull(builder.handler, "handler is required");
    this.fingerprint = builder.fingerprint;
  }

  public static <K, V> Builder<K, V> builder(IdempotentExecutor executor) {
    return new Builder<>(executor);
  }

  /**
   * Handles one record at most once per business key.
   *
   * @return PROCESSED if the handler ran, DUPLICATE if the key had already succeeded
   * @throws DedupKeyMissingException the record has no usable key and the policy is FAIL (a {@link
   *     DedupKeyMalformedException} if it has one that cannot be used, whatever the policy)
   * @throws io.consumerdedup.core.DedupInProgressException another consumer is working on the key;
   *     retry the record later
   */
  public Outcome handle(ConsumerRecord<K, V> record) {
    String source = keys.source(record);
    Optional<DedupKey> key = keys.resolve(record);
    if (key.isEmpty()) {
      runUnprotected(record, source);
      return Outcome.PROCESSED;
    }
    String print = fingerprint == null ? null : fingerprint.apply(record);
    return executor
        .execute(
            key.get(),
            print,
            source,
            () -> {
              handler.handle(record);
              return null;
            })
        .outcome();
  }

  /** The same as {@link #handle(ConsumerRecord)}. */
  @Override
  public Outcome process(ConsumerRecord<K, V> record) {
    return handle(record);
  }

  /**
   * The attempts the dedup table counts for the record's key ({@link DedupRecord#attempts()}):
   * every claim, by any consumer, including the one that just failed. Empty if the record has no
   * usable key, or the table has no record for it (in mode TRANSACTIONAL a failed attempt leaves
   * none).
   *
   * @throws DedupStoreException if the store cannot be read
   */
  @Override
  public OptionalInt attempts(ConsumerRecord<K, V> record) {
    Optional<DedupKey> key = keys.claimedKey(record);
    if (key.isEmpty()) {
      return OptionalInt.empty();
    }
    return executor.store().find(key.get()).stream().mapToInt(DedupRecord::attempts).findFirst();
  }

  private void runUnprotected(ConsumerRecord<K, V> record, String source) {
    try {
      handler.handle(record);
    } catch (RuntimeException e) {
      throw e;
    } catch (Exception e) {
      throw new DedupHandlerException(null, source, e);
    }
  }

  /** The biz type this handler deduplicates under. */
  public String bizType() {
    return keys.bizType();
  }

  /** Builds an {@link IdempotentRecordHandler}. */
  public static final class Builder<K, V> {
    private final IdempotentExecutor executor;
    private @Nullable String bizType;
    private @Nullable KeyExtractor<K, V> keyExtractor;
    private @Nullable RecordHandler<K, V> handler;
    private MissingKeyPolicy missingKeyPolicy = DEFAULT_MISSING_KEY_POLICY;
    private @Nullable Function<ConsumerRecord<K, V>, String> fingerprint;
    private @Nullable String groupId;

    private Builder(IdempotentExecutor executor) {
      this.executor = Objects.requireNonNull(executor, "executor");
    }

    /**
     * The kind of action, such as {@code payment}; validated as {@link DedupKey} does. Required.
     */
    public Builder<K, V> bizType(String bizType) {
      DedupKey.of(bizType, "validation");
      this.bizType = bizType;
      return this;
    }

    /** How to derive the business key. Required; usually {@link KeyExtractors#header(String)}. */
    public Builder<K, V> key(KeyExtractor<K, V> keyExtractor) {
      this.keyExtractor = Objects.requireNonNull(keyExtractor, "keyExtractor");
      return this;
    }

    /** The work to apply once per key. Required. */
    public Builder<K, V> handler(RecordHandler<K, V> handler) {
      this.handler = Objects.requireNonNull(handler, "handler");
      return this;
    }

    /** What to do with a record without a key. Default {@link #DEFAULT_MISSING_KEY_POLICY}. */
    public Builder<K, V> missingKeyPolicy(MissingKeyPolicy missingKeyPolicy) {
      this.missingKeyPolicy = Objects.requireNonNull(missingKeyPolicy, "missingKeyPolicy");
      return this;
    }

    /**
     * A digest of the payload (at most 64 characters, such as a hex SHA-256): a later record with
     * the same key and another digest is refused as a conflict. Default: none.
     */
    public Builder<K, V> fingerprint(Function<ConsumerRecord<K, V>, String> fingerprint) {
      this.fingerprint = Objects.requireNonNull(fingerprint, "fingerprint");
      return this;
    }

    /** The consumer group, named in records and exceptions. Default: not named. */
    public Builder<K, V> groupId(String groupId) {
      this.groupId = Objects.requireNonNull(groupId, "groupId");
      return this;
    }

    public IdempotentRecordHandler<K, V> build() {
      return new IdempotentRecordHandler<>(this);
    }
  }
}
