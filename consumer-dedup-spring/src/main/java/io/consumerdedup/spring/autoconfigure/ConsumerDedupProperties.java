package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.core.ConflictPolicy;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.InProgressPolicy;
import io.consumerdedup.jdbc.DedupJanitor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.kafka.DedupPollLoop;
import io.consumerdedup.kafka.DedupShareLoop;
import io.consumerdedup.kafka.IdempotentRecordHandler;
import io.consumerdedup.kafka.MissingKeyPolicy;
import io.consumerdedup.spring.IdempotentListenerInterceptor;
import java.time.Duration;
import java.time.temporal.ChronoUnit;
import java.util.LinkedHashSet;
import java.util.Set;
import org.jspecify.annotations.Nullable;
import org.springframework.beans.factory.InitializingBean;
import org.springframework.boot.context.properties.ConfigurationProperties;
import org.springframework.boot.convert.DurationUnit;

/**
 * {@code consumer-dedup.*}: the settings of the store, the engine and the janitor. Every default is
 * the core's {@code DEFAULT_*} constant. Every value is checked when the context starts ({@link
 * #afterPropertiesSet()}): a bad one stops the application with the property's name, the value and
 * what is allowed, instead of failing records later.
 *
 * <p>A duration without a unit means seconds for {@code lease} and {@code wait-timeout}, days for
 * {@code retention} and {@code failed-retention}, and milliseconds elsewhere; writing the unit
 * ({@code 30s}, {@code 7d}) is clearer.
 */
@ConfigurationProperties(prefix = "consumer-dedup")
public class ConsumerDedupProperties implements InitializingBean {

  /**
   * Default of {@code health-timeout}: below the 1 s a Kubernetes probe waits by default, so that
   * the probe reads the reason. Kept here rather than on the health indicator, which needs
   * Actuator: an application without it loads this class.
   */
  public static final Duration DEFAULT_HEALTH_TIMEOUT = Duration.ofMillis(800);

  /** Whether consumer-dedup is configured at all. */
  private boolean enabled = true;

  /** The dedup table, optionally schema-qualified. */
  private String tableName = JdbcDedupStore.DEFAULT_TABLE_NAME;

  /**
   * How long a claim holds a key without renewal before another consumer may take it over; renewed
   * while the listener runs.
   */
  @DurationUnit(ChronoUnit.SECONDS)
  private Duration lease = IdempotentExecutor.DEFAULT_LEASE;

  /** How long a SUCCESS record is kept: redeliveries within it are recognised as duplicates. */
  @DurationUnit(ChronoUnit.DAYS)
  private Duration retention = IdempotentExecutor.DEFAULT_SUCCESS_RETENTION;

  /** How long a FAILED or abandoned record is kept. */
  @DurationUnit(ChronoUnit.DAYS)
  private Duration failedRetention = IdempotentExecutor.DEFAULT_FAILED_RETENTION;

  /**
   * SEPARATE (claim in its own transaction; side effects anywhere) or TRANSACTIONAL (claim in the
   * listener's transaction on the dedup table's DataSource).
   */
  private DedupMode mode = IdempotentExecutor.DEFAULT_MODE;

  /** THROW (retry the record later through the error handler) or WAIT (poll until done). */
  private InProgressPolicy inProgressPolicy = IdempotentExecutor.DEFAULT_IN_PROGRESS_POLICY;

  /** Longest wait under in-progress policy WAIT. */
  @DurationUnit(ChronoUnit.SECONDS)
  private Duration waitTimeout = IdempotentExecutor.DEFAULT_WAIT_TIMEOUT;

  /** THROW (refuse a differing payload under a known key) or TREAT_AS_DUPLICATE. */
  private ConflictPolicy conflictPolicy = IdempotentExecutor.DEFAULT_CONFLICT_POLICY;

  /**
   * What to do with a record without a key: FAIL (not retryable: dead-letter topic),
   * PROCESS_WITHOUT_DEDUP or USE_COORDINATES.
   */
  private MissingKeyPolicy missingKeyPolicy = IdempotentRecordHandler.DEFAULT_MISSING_KEY_POLICY;

  /**
   * How many times a failing listener runs for one key, counted in the dedup table across restarts,
   * rebalances and instances; then its record goes to the error handler's recoverer without being
   * run again. The error handler's own back-off still paces and may end the retries sooner within
   * one run. Default 10, the deliveries of spring-kafka's default error handler.
   */
  private int maxAttempts = IdempotentListenerInterceptor.DEFAULT_MAX_ATTEMPTS;

  /**
   * Whether an {@code @Idempotent} record listener claims the keys of each poll in one statement,
   * its SUCCESS marks written in the background in groups and durable before the container commits
   * past them (true), or claims and marks each record on its own before returning (false). A share
   * listener likewise claims the records waiting for its worker together, and accepts each once its
   * SUCCESS is written (true), or claims and marks each on its own (false).
   */
  private boolean claimsPerPoll = true;

  /**
   * How long the consumer thread waits for the CompletableFuture or Mono of an {@code @Idempotent}
   * listener; past it the key's lease is no longer renewed and the record is retried once the lease
   * has run out.
   */
  private Duration asyncListenerTimeout =
      IdempotentListenerInterceptor.DEFAULT_ASYNC_LISTENER_TIMEOUT;

  /**
   * How long the consumerdedup health check waits for the dedup table before it answers DOWN; below
   * a probe's timeout (Kubernetes: 1 s by default).
   */
  private Duration healthTimeout = DEFAULT_HEALTH_TIMEOUT;

  /**
   * The bean name of the DataSource that holds the dedup table, in an application with more than
   * one; default: the only DataSource, or the {@code @Primary} one.
   */
  private @Nullable String dataSource;

  /** The owner written to claims; default: host name, process id and a random part. */
  private @Nullable String ownerId;

  /**
   * Biz types that {@code @Idempotent} listeners of different consumer groups may share on purpose
   * (each key applied once by whichever group comes first). Any other biz type shared across groups
   * stops the application at start-up.
   */
  private Set<String> sharedBizTypes = new LinkedHashSet<>();

  /**
   * When to create the dedup table: NEVER (you run the migration) or ALWAYS (if it is absent;
   * PostgreSQL only, and the application then does not start while the database cannot be reached).
   */
  private SchemaInitialization initializeSchema = SchemaInitialization.NEVER;

  private final Store store = new Store();
  private final Hold hold = new Hold();
  private final Share share = new Share();
  private final Cleanup cleanup = new Cleanup();
  private final Admin admin = new Admin();

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

  /** {@code consumer-dedup.share.*}: {@code @Idempotent} listeners of share groups. */
  public static class Share {
    /**
     * The broker's {@code group.share.delivery.count.limit}, which this must match: a failure on
     * this delivery is dead-lettered and rejected instead of released. Set higher than the
     * broker's, a failing record released on its real last delivery is archived by the broker
     * without its dead letter.
     */
    private int deliveryCountLimit = DedupShareLoop.DEFAULT_DELIVERY_COUNT_LIMIT;

    /**
     * How long a record whose listener failed (attempts left) waits before it is released for
     * another delivery, its lock renewed meanwhile; as {@code DedupShareLoop.Builder.retryBackOff}.
     */
    private Duration retryBackoff = DedupShareLoop.DEFAULT_RETRY_BACKOFF;

    /**
     * How long a stopping container lets the handler in hand finish (and its outcome be recorded)
     * before its consumer closes; a record whose handler outlasts it is given back unacknowledged
     * and delivered again, which a WARN says. As {@code DedupShareLoop.Builder.closeTimeout}.
     */
    private Duration closeTimeout = DedupShareLoop.DEFAULT_CLOSE_TIMEOUT;

    public int getDeliveryCountLimit() {
      return deliveryCountLimit;
    }

    public void setDeliveryCountLimit(int deliveryCountLimit) {
      this.deliveryCountLimit = deliveryCountLimit;
    }

    public Duration getRetryBackoff() {
      return retryBackoff;
    }

    public void setRetryBackoff(Duration retryBackoff) {
      this.retryBackoff = retryBackoff;
    }

    public Duration getCloseTimeout() {
      return closeTimeout;
    }

    public void setCloseTimeout(Duration closeTimeout) {
      this.closeTimeout = closeTimeout;
    }
  }

  /** {@code consumer-dedup.admin.*}: the {@code consumerdedup} Actuator endpoint. */
  public static class Admin {
    /**
     * Whether the endpoint's write operations (release, forget) run; off by default, so exposing
     * the endpoint shows the records but changes nothing.
     */
    private boolean writeEnabled = false;

    public boolean isWriteEnabled() {
      return writeEnabled;
    }

    public void setWriteEnabled(boolean writeEnabled) {
      this.writeEnabled = writeEnabled;
    }
  }

  /** {@code consumer-dedup.cleanup.*}: the retention purge. */
  public static class Cleanup {
    /** Whether this instance purges expired records (safe on every instance at once). */
    private boolean enabled = true;

    /** Time between purge runs once a run has caught up. */
    private Duration interval = DedupJanitor.DEFAULT_INTERVAL;

    /** Rows deleted per statement. */
    private int batchSize = DedupJanitor.DEFAULT_BATCH_SIZE;

    /** Most batches per run; a run that stops with work left is followed by the next at once. */
    private int maxBatchesPerRun = DedupJanitor.DEFAULT_MAX_BATCHES_PER_RUN;

    /** Longest run; a run that stops with work left is followed by the next at once. */
    private Duration maxRunTime = DedupJanitor.DEFAULT_MAX_RUN_TIME;

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

    public Duration getMaxRunTime() {
      return maxRunTime;
    }

    public void setMaxRunTime(Duration maxRunTime) {
      this.maxRunTime = maxRunTime;
    }
  }

  /**
   * Checks every value, and the values that cannot be meant together ({@link
   * DedupPropertiesCheck}).
   *
   * @throws InvalidDedupPropertyException naming the first bad property, its value and what is
   *     allowed
   */
  @Override
  public void afterPropertiesSet() {
    DedupPropertiesCheck.check(this);
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

  public Duration getAsyncListenerTimeout() {
    return asyncListenerTimeout;
  }

  public void setAsyncListenerTimeout(Duration asyncListenerTimeout) {
    this.asyncListenerTimeout = asyncListenerTimeout;
  }

  public Duration getHealthTimeout() {
    return healthTimeout;
  }

  public void setHealthTimeout(Duration healthTimeout) {
    this.healthTimeout = healthTimeout;
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

  public int getMaxAttempts() {
    return maxAttempts;
  }

  public void setMaxAttempts(int maxAttempts) {
    this.maxAttempts = maxAttempts;
  }

  public boolean isClaimsPerPoll() {
    return claimsPerPoll;
  }

  public void setClaimsPerPoll(boolean claimsPerPoll) {
    this.claimsPerPoll = claimsPerPoll;
  }

  public @Nullable String getDataSource() {
    return dataSource;
  }

  public void setDataSource(@Nullable String dataSource) {
    this.dataSource = dataSource;
  }

  public @Nullable String getOwnerId() {
    return ownerId;
  }

  public void setOwnerId(@Nullable String ownerId) {
    this.ownerId = ownerId;
  }

  public Set<String> getSharedBizTypes() {
    return sharedBizTypes;
  }

  public void setSharedBizTypes(Set<String> sharedBizTypes) {
    this.sharedBizTypes = sharedBizTypes;
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

  public Share getShare() {
    return share;
  }

  public Store getStore() {
    return store;
  }

  public Cleanup getCleanup() {
    return cleanup;
  }

  public Admin getAdmin() {
    return admin;
  }
}
