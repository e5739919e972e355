package io.consumerdedup.spring;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.InProgressPolicy;
import io.consumerdedup.spring.internal.ListenerOutcomes;
import java.time.Duration;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Consumer;
import javax.sql.DataSource;
import org.jspecify.annotations.Nullable;
import org.springframework.transaction.support.TransactionSynchronizationManager;

/**
 * The executors of all idempotent listeners: one {@link IdempotentExecutor} per distinct
 * per-listener setting (lease, in-progress policy, mode), built lazily and shared, all over the
 * same stores. Closing it stops every executor's lease renewal.
 *
 * <p>Two stores, because the modes need different connections: {@link DedupMode#SEPARATE} claims on
 * a connection of its own (a plain DataSource), {@link DedupMode#TRANSACTIONAL} on the listener's
 * transactional connection (a {@code TransactionAwareDataSourceProxy} of the same DataSource). A
 * TRANSACTIONAL claim is refused unless a Spring transaction is bound to that DataSource: on any
 * other connection nobody would commit the row, and the listener would be deduplicated by nothing.
 */
public final class IdempotentExecutors implements AutoCloseable {

  /** Per-listener settings; null means the application's default. */
  public record Overrides(
      @Nullable Duration lease,
      @Nullable InProgressPolicy inProgressPolicy,
      @Nullable DedupMode mode) {
    public static final Overrides NONE = new Overrides(null, null, null);
  }

  private final DedupStore separateStore;
  private final DedupStore transactionalStore;
  private final DataSource dataSource;
  private final Consumer<IdempotentExecutor.Builder> defaults;
  private final DedupMode defaultMode;
  private final Map<Overrides, IdempotentExecutor> executors = new ConcurrentHashMap<>();

  /**
   * @param separateStore claims in transactions of their own
   * @param transactionalStore claims in the caller's transaction
   * @param dataSource the DataSource both stores reach (not a transaction-aware proxy): a
   *     TRANSACTIONAL claim needs a transaction bound to it
   * @param defaults applies the application's settings to each new builder (overrides come after)
   * @param defaultMode the mode of listeners that do not choose one
   */
  public IdempotentExecutors(
      DedupStore separateStore,
      DedupStore transactionalStore,
      DataSource dataSource,
      Consumer<IdempotentExecutor.Builder> defaults,
      DedupMode defaultMode) {
    this.separateStore = Objects.requireNonNull(separateStore, "separateStore");
    this.transactionalStore = Objects.requireNonNull(transactionalStore, "transactionalStore");
    this.dataSource = Objects.requireNonNull(dataSource, "dataSource");
    this.defaults = Objects.requireNonNull(defaults, "defaults");
    this.defaultMode = Objects.requireNonNull(defaultMode, "defaultMode");
  }

  /** The executor for these overrides, built on first use. */
  public IdempotentExecutor executor(Overrides overrides) {
    return executors.computeIfAbsent(overrides, this::build);
  }

  /** The executor of listeners without overrides. */
  public IdempotentExecutor defaultExecutor() {
    return executor(Overrides.NONE);
  }

  /** The store that claims in transactions of its own (and answers {@code find}). */
  public DedupStore store() {
    return separateStore;
  }

  /**
   * Refuses a TRANSACTIONAL claim outside a transaction on the dedup table's DataSource (a Kafka
   * transaction alone does not count: the row would be written on a connection nobody commits).
   *
   * @throws DedupConfigurationException naming {@code listener} and what to configure
   */
  public void requireTransaction(String listener, @Nullable DedupKey key, String source) {
    if (!TransactionSynchronizationManager.hasResource(dataSource)) {
      throw new DedupConfigurationException(
          "Listener "
              + listener
              + " uses consumer-dedup mode TRANSACTIONAL but no transaction is bound to the dedup"
              + " table's DataSource"
              + (TransactionSynchronizationManager.isActualTransactionActive()
                      || ListenerOutcomes.inKafkaTransaction()
                  ? " (the active transaction is on another resource, such as Kafka's)"
                  : "")
              + ": give its container a DataSourceTransactionManager (or JpaTransactionManager) on"
              + " that DataSource, or annotate the listener @Transactional; the record waits"
              + " until then",
          key,
          source);
    }
  }

  /** The mode of listeners with these overrides. */
  public DedupMode modeOf(Overrides overrides) {
    return overrides.mode() != null ? overrides.mode() : defaultMode;
  }

  private IdempotentExecutor build(Overrides overrides) {
    DedupMode mode = modeOf(overrides);
    IdempotentExecutor.Builder builder =
        IdempotentExecutor.builder(
            mode == DedupMode.TRANSACTIONAL ? transactionalStore : separateStore);
    defaults.accept(builder);
    builder.mode(mode);
    if (overrides.lease() != null) {
      builder.lease(overrides.lease());
    }
    if (overrides.inProgressPolicy() != null) {
      builder.inProgressPolicy(overrides.inProgressPolicy());
    }
    return builder.build();
  }

  @Override
  public void close() {
    executors.values().forEach(IdempotentExecutor::close);
    executors.clear();
  }
}
