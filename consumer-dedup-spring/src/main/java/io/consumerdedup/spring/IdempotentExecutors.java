package io.consumerdedup.spring;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupExecutorClosedException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.InProgressPolicy;
import io.consumerdedup.spring.internal.AbortedTransactionCheck;
import io.consumerdedup.spring.internal.ListenerOutcomes;
import java.time.Duration;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Consumer;
import javax.sql.DataSource;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
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

  private static final Logger log = LoggerFactory.getLogger(IdempotentExecutors.class);

  private final DedupStore separateStore;
  private final DedupStore transactionalStore;
  private final DataSource dataSource;
  private final Consumer<IdempotentExecutor.Builder> defaults;
  private final DedupMode defaultMode;
  private final Map<Overrides, IdempotentExecutor> executors = new ConcurrentHashMap<>();
  private final Set<String> warnedInKafkaTransaction = ConcurrentHashMap.newKeySet();

  /**
   * Set by {@link #close}: a listener call that comes later (a container whose stop outlasted the
   * shutdown phase's timeout still delivering) is refused, rather than given a new executor that
   * nobody would close.
   */
  private volatile boolean closed;

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

  /**
   * The executor for these overrides, built on first use.
   *
   * @throws DedupExecutorClosedException these executors are closed ({@code RETRY_LATER}: the
   *     record is not run, and comes again to a consumer whose executors run)
   */
  public IdempotentExecutor executor(Overrides overrides) {
    if (!closed) {
      IdempotentExecutor executor = executors.computeIfAbsent(overrides, this::build);
      if (!closed) {
        return executor;
      }
      executor.close(); // built as close() ran, which may not have seen it
    }
    throw new DedupExecutorClosedException(
        "The application's consumer-dedup executors are closed (it is shutting down)",
        null,
        null,
        null);
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
   * Inside a Kafka transaction as well, warns once per listener: the two commit one after the
   * other, and no mode can make a message sent in the Kafka one exactly once with the database's.
   * Has the transaction refuse its commit if the database aborted it meanwhile ({@link
   * AbortedTransactionCheck}).
   *
   * @throws DedupConfigurationException naming {@code listener} and what to configure, also for a
   *     read-only transaction
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
    if (TransactionSynchronizationManager.isCurrentTransactionReadOnly()) {
      // The claim's statements fail there (PostgreSQL's 25006, or a read-only replica that a
      // routing DataSource picks for such transactions), which the store reports as a database
      // that refuses writes for now: "unavailable", retried for good at WARN, the listener's
      // setting never named.
      throw new DedupConfigurationException(
          "Listener "
              + listener
              + " uses consumer-dedup mode TRANSACTIONAL in a read-only transaction"
              + " (@Transactional(readOnly = true), on the method or its class), where the dedup"
              + " row cannot be written: give the listener a read-write transaction"
              + " (@Transactional on the method), or mode SEPARATE; the record waits until then",
          key,
          source);
    }
    AbortedTransactionCheck.register();
    if (ListenerOutcomes.inKafkaTransaction() && warnedInKafkaTransaction.add(listener)) {
      log.warn(
          "Listener {} uses consumer-dedup mode TRANSACTIONAL inside the container's Kafka"
              + " transaction: the dedup row commits with the database's transaction, before"
              + " Kafka's. If Kafka's commit then fails (a broker refusing a record, a transaction"
              + " timeout, a fenced producer), the record comes again and is skipped as a"
              + " duplicate, and what the listener sent in the aborted Kafka transaction is never"
              + " sent. To have both exactly once, write those messages to an outbox table in the"
              + " same database transaction instead of sending them; or use mode SEPARATE with"
              + " database writes that tolerate a second run",
          listener);
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
    closed = true;
    executors.values().forEach(IdempotentExecutor::close);
    executors.clear();
  }
}
