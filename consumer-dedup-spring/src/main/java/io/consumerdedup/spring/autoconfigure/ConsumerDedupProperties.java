package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.core.ConflictPolicy;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.InProgressPolicy;
import io.consumerdedup.jdbc.DedupJanitor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.kafka.DedupPollLoop;
import io.consumerdedup.kafka.IdempotentRecordHandler;
import io.consumerdedup.kafka.MissingKeyPolicy;
import java.time.Duration;
import org.jspecify.annotations.Nullable;
import org.springframework.boot.context.properties.ConfigurationProperties;

/**
 * {@code consumer-dedup.*}: the settings of the store, the engine and the janitor. Every default is
 * the core's {@code DEFAULT_*} constant.
 */
@ConfigurationProperties(prefix = "consumer-dedup")
public class ConsumerDedupProperties {

  /** Whether consumer-dedup is configured at all. */
  private boolean enabled = true;

  /** The dedup table, optionally schema-qualified. */
  private String tableName = JdbcDedupStore.DEFAULT_TABLE_NAME;

  /**
   * How long a claim holds a key without renewal before another consumer may take it over; renewed
   * while the listener runs.
   */
  private Duration lease = IdempotentExecutor.DEFAULT_LEASE;

  /** How long a SUCCESS record is kept: redeliveries within it are recognised as duplicates. */
  private Duration retention = IdempotentExecutor.DEFAULT_SUCCESS_RETENTION;

  /** How long a FAILED or abandoned record is kept. */
  private Duration failedRetention = IdempotentExecutor.DEFAULT_FAILED_RETENTION;

  /**
   * SEPARATE (claim in its own transaction; side effects anywhere) or TRANSACTIONAL (claim in the
   * listener's transaction on the dedup table's DataSource).
   */
  private DedupMode mode = IdempotentExecutor.DEFAULT_MODE;

  /** THROW (retry the record later through the error handler) or WAIT (poll until done). */
  private InProgressPolicy inProgressPolicy = IdempotentExecutor.DEFAULT_IN_PROGRESS_POLICY;

  /** Longest wait under in-progress policy WAIT. */
  private Duration waitTimeout = IdempotentExecutor.DEFAULT_WAIT_TIMEOUT;

  /** THROW (refuse a differing payload under a known key) or TREAT_AS_DUPLICATE. */
  private ConflictPolicy conflictPolicy = IdempotentExecutor.DEFAULT_CONFLICT_POLICY;

  /**
   * What to do with a record without a key: FAIL (not retryable: dead-letter topic),
   * PROCESS_WITHOUT_DEDUP or USE_COORDINATES.
   */
  private MissingKeyPolicy missingKeyPolicy = IdempotentRecordHandler.DEFAULT_MISSING_KEY_POLICY;

  /** The owner written to claims; default: host name, process id and a random part. */
  private @Nullable String ownerId;

  /** When to create the dedup table: NEVER (you run the migration) or ALWAYS (if it is absent). */
  private SchemaInitialization initializeSchema = SchemaInitialization.NEVER;

  private final Store store = new Store();
  private final Hold hold = new Hold();
  private final Cleanup cleanup = new Cleanup();

  /** When the auto-configuration creates the dedup table. */
  public enum SchemaInitialization {
    /** Never: apply {@code db/consumer-dedup/postgresql/V1__consumer_dedup.sql} yourself. */
    NEVER,
    /** At start-up, if the table does not exist yet. */
    ALWAYS
  }

  /** {@code consumer-dedup.store.*}: retries of transient database errors. */
  public static class Store {
    /** Tries of a store call on transient errors, the first included; 1 disables retries. */
    private int retryMaxAttempts = JdbcDedupStore.DEFAULT_RETRY_MAX_ATTEMPTS;

    /** Wait before the first retry; it doubles each retry, with jitter. */
    private Duration retryInitialBackoff = JdbcDedupStore.DEFAULT_RETRY_INITIAL_BACKOFF;

    /** Longest wait between two retries. */
    private Duration retryMaxBackoff = JdbcDedupStore.DEFAULT_RETRY_MAX_BACKOFF;

    /** Time after the start of a store call past which a transient failure is not retried. */
    private Duration retryMaxDuration = JdbcDedupStore.DEFAULT_RETRY_MAX_DURATION;

    /**
     * Longest time one statement may run before the database cancels it; a connection that stops
     * answering fails after twice this.
     */
    private Duration statementTimeout = JdbcDedupStore.DEFAULT_STATEMENT_TIMEOUT;

    public Duration getRetryMaxDuration() {
      return retryMaxDuration;
    }

    public void setRetryMaxDuration(Duration retryMaxDuration) {
      this.retryMaxDuration = retryMaxDuration;
    }

    public Duration getStatementTimeout() {
      return statementTimeout;
    }

    public void setStatementTimeout(Duration statementTimeout) {
      this.statementTimeout = statementTimeout;
    }

    public int getRetryMaxAttempts() {
      return retryMaxAttempts;
    }

    public void setRetryMaxAttempts(int retryMaxAttempts) {
      this.retryMaxAttempts = retryMaxAttempts;
    }

    public Duration getRetryInitialBackoff() {
      return retryInitialBackoff;
    }

    public void setRetryInitialBackoff(Duration retryInitialBackoff) {
      this.retryInitialBackoff = retryInitialBackoff;
    }

    public Duration getRetryMaxBackoff() {
      return retryMaxBackoff;
    }

    public void setRetryMaxBackoff(Duration retryMaxBackoff) {
      this.retryMaxBackoff = retryMaxBackoff;
    }
  }

  /**
   * {@code consumer-dedup.hold.*}: how a record waits that cannot be handled yet (another consumer
   * holds its key, the dedup store is unreachable): its partition is paused for the back-off,
   * doubling per consecutive hold of the record, then the record is tried again. It is never
   * recovered or skipped.
   */
  public static class Hold {
    /** First wait of a held record. */
    private Duration initialBackoff = DedupPollLoop.DEFAULT_HOLD_BACKOFF;

    /** Longest wait of a held record. */
    private Duration maxBackoff = DedupPollLoop.DEFAULT_MAX_HOLD_BACKOFF;

    public Duration getInitialBackoff() {
      return initialBackoff;
    }

    public void setInitialBackoff(Duration initialBackoff) {
      this.initialBackoff = initialBackoff;
    }

    public Duration getMaxBackoff() {
      return maxBackoff;
    }

    public void setMaxBackoff(Duration maxBackoff) {
      this.maxBackoff = maxBackoff;
    }
  }

  /** {@code consumer-dedup.cleanup.*}: the retention purge. */
  public static class Cleanup {
    /** Whether this instance purges expired records (safe on every instance at once). */
    private boolean enabled = true;

    /** Time between purge runs. */
    private Duration interval = DedupJanitor.DEFAULT_INTERVAL;

    /** Rows deleted per statement. */
    private int batchSize = DedupJanitor.DEFAULT_BATCH_SIZE;

    /** Most batches per run. */
    private int maxBatchesPerRun = DedupJanitor.DEFAULT_MAX_BATCHES_PER_RUN;

    public boolean isEnabled() {
      return enabled;
    }

    public void setEnabled(boolean enabled) {
      this.enabled = enabled;
    }

    public Duration getInterval() {
      return interval;
    }

    public void setInterval(Duration interval) {
      this.interval = interval;
    }

    public int getBatchSize() {
      return batchSize;
    }

    public void setBatchSize(int batchSize) {
      this.batchSize = batchSize;
    }

    public int getMaxBatchesPerRun() {
      return maxBatchesPerRun;
    }

    public void setMaxBatchesPerRun(int maxBatchesPerRun) {
      this.maxBatchesPerRun = maxBatchesPerRun;
    }
  }

  public boolean isEnabled() {
    return enabled;
  }

  public void setEnabled(boolean enabled) {
    this.enabled = enabled;
  }

  public String getTableName() {
    return tableName;
  }

  public void setTableName(String tableName) {
    this.tableName = tableName;
  }

  public Duration getLease() {
    return lease;
  }

  public void setLease(Duration lease) {
    this.lease = lease;
  }

  public Duration getRetention() {
    return retention;
  }

  public void setRetention(Duration retention) {
    this.retention = retention;
  }

  public Duration getFailedRetention() {
    return failedRetention;
  }

  public void setFailedRetention(Duration failedRetention) {
    this.failedRetention = failedRetention;
  }

  public DedupMode getMode() {
    return mode;
  }

  public void setMode(DedupMode mode) {
    this.mode = mode;
  }

  public InProgressPolicy getInProgressPolicy() {
    return inProgressPolicy;
  }

  public void setInProgressPolicy(InProgressPolicy inProgressPolicy) {
    this.inProgressPolicy = inProgressPolicy;
  }

  public Duration getWaitTimeout() {
    return waitTimeout;
  }

  public void setWaitTimeout(Duration waitTimeout) {
    this.waitTimeout = waitTimeout;
  }

  public ConflictPolicy getConflictPolicy() {
    return conflictPolicy;
  }

  public void setConflictPolicy(ConflictPolicy conflictPolicy) {
    this.conflictPolicy = conflictPolicy;
  }

  public MissingKeyPolicy getMissingKeyPolicy() {
    return missingKeyPolicy;
  }

  public void setMissingKeyPolicy(MissingKeyPolicy missingKeyPolicy) {
    this.missingKeyPolicy = missingKeyPolicy;
  }

  public @Nullable String getOwnerId() {
    return ownerId;
  }

  public void setOwnerId(@Nullable String ownerId) {
    this.ownerId = ownerId;
  }

  public SchemaInitialization getInitializeSchema() {
    return initializeSchema;
  }

  public void setInitializeSchema(SchemaInitialization initializeSchema) {
    this.initializeSchema = initializeSchema;
  }

  public Hold getHold() {
    return hold;
  }

  public Store getStore() {
    return store;
  }

  public Cleanup getCleanup() {
    return cleanup;
  }
}
