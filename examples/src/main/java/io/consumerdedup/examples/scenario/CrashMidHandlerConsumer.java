package io.consumerdedup.examples.scenario;

import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.examples.kafka.ConsumerLoop;
import io.consumerdedup.examples.kafka.ConsumerSetup;
import io.consumerdedup.examples.kafka.DedupConsumer;
import io.consumerdedup.examples.kafka.ScenarioConsumer;
import io.consumerdedup.examples.ledger.Bank;
import io.consumerdedup.examples.ledger.EffectHandler;
import io.consumerdedup.examples.ledger.EffectKind;
import io.consumerdedup.examples.ledger.Ledger;
import io.consumerdedup.examples.report.RunStats;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.jdbc.TransactionBoundDataSource;
import io.consumerdedup.kafka.JdbcTransactionalProcessor;
import io.consumerdedup.kafka.RecordHandler;
import io.consumerdedup.kafka.RecordProcessor;
import java.time.Duration;
import java.util.Locale;
import javax.sql.DataSource;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.jspecify.annotations.Nullable;

/**
 * The payment consumer of the crash-mid-handler scenario, built the same way in the child JVM that
 * is killed inside its handler and in the consumer restarted after it. The application's code
 * ({@link EffectHandler}: call the bank, book the charge) is the same under every {@link
 * Protection}; only what wraps it differs: the naive loop without dedup, and with dedup the
 * library's {@code DedupPollLoop} running an {@code IdempotentRecordHandler}, in mode TRANSACTIONAL
 * inside a {@link JdbcTransactionalProcessor}.
 */
final class CrashMidHandlerConsumer implements AutoCloseable {
  static final String KEY_HEADER = "order-no";
  static final String BIZ_TYPE = "payment";

  /**
   * The child and the restarted consumer are one static member of the group, as a restarted pod
   * with a stable name is: the restart takes the killed member's place at once instead of waiting
   * for its session to time out, so it arrives while the killed child's dedup lease still runs.
   */
  private static final String GROUP_INSTANCE_ID = "billing-0";

  /** What wraps the consumer code. */
  enum Protection {
    /** The code as it is: every delivery charges. */
    NONE("without dedup"),
    /**
     * {@code DedupMode.SEPARATE}: the claim (PROCESSING, under a lease), the charge and SUCCESS
     * each commit on their own.
     */
    SEPARATE("dedup SEPARATE"),
    /**
     * {@code DedupMode.TRANSACTIONAL}: one JDBC transaction per record ({@link
     * JdbcTransactionalProcessor} on a {@link TransactionBoundDataSource}) holds the dedup row and
     * the charge, and commits before the Kafka offset does.
     */
    TRANSACTIONAL("dedup TRANSACTIONAL");

    private final String label;

    Protection(String label) {
      this.label = label;
    }

    /** The report's label, such as {@code dedup SEPARATE}. */
    String label() {
      return label;
    }

    /** The run's name in schema names and progress lines, such as {@code separate}. */
    String mode() {
      return this == NONE ? "without" : name().toLowerCase(Locale.ROOT);
    }

    boolean withDedup() {
      return this != NONE;
    }
  }

  private final RecordHandler<String, String> handler;
  private final @Nullable RecordProcessor<String, String> protectedHandler;
  private final @Nullable IdempotentExecutor executor;

  private CrashMidHandlerConsumer(
      RecordHandler<String, String> handler,
      @Nullable RecordProcessor<String, String> protectedHandler,
      @Nullable IdempotentExecutor executor) {
    this.handler = handler;
    this.protectedHandler = protectedHandler;
    this.executor = executor;
  }

  /**
   * The consumer code under {@code protection}.
   *
   * @param pool the run's schema; with TRANSACTIONAL, each record gets a transaction on it
   * @param ownerId names this consumer as the holder of the keys it claims
   * @param afterCharge runs inside the handler, right after the charge is booked: where the child
   *     signals its parent and waits to be killed
   */
  static CrashMidHandlerConsumer create(
      Protection protection,
      DataSource pool,
      Duration lease,
      String ownerId,
      String group,
      String name,
      RunStats stats,
      RecordHandler<String, String> afterCharge) {
    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(pool);
    // In TRANSACTIONAL the charge must go through the record's transaction, next to the dedup row.
    Ledger ledger = new Ledger(protection == Protection.TRANSACTIONAL ? transactions : pool);
    EffectHandler payments =
        new EffectHandler(ledger, EffectKind.CHARGE, KEY_HEADER, Bank.healthy(), name, stats);
    RecordHandler<String, String> handler =
        record -> {
          payments.handle(record);
          afterCharge.handle(record);
        };
    return switch (protection) {
      case NONE -> new CrashMidHandlerConsumer(handler, null, null);
      case SEPARATE -> {
        IdempotentExecutor executor =
            IdempotentExecutor.builder(JdbcDedupStore.builder(pool).build())
                .lease(lease)
                .ownerId(ownerId)
                .build();
        yield new CrashMidHandlerConsumer(
            handler,
            ScenarioRun.idempotent(executor, group, BIZ_TYPE, KEY_HEADER, handler),
            executor);
      }
      case TRANSACTIONAL -> {
        IdempotentExecutor executor =
            IdempotentExecutor.builder(JdbcDedupStore.builder(transactions).build())
                .mode(DedupMode.TRANSACTIONAL)
                .ownerId(ownerId)
                .build();
        // Begin, claim and charge, commit; the loop commits the offset only after this returns.
        yield new CrashMidHandlerConsumer(
            handler,
            JdbcTransactionalProcessor.of(
                transactions,
                ScenarioRun.idempotent(executor, group, BIZ_TYPE, KEY_HEADER, handler)),
            executor);
      }
    };
  }

  /**
   * The consumer: the naive loop without dedup, the library's loop with it; the group's one static
   * member (see {@link #GROUP_INSTANCE_ID}).
   */
  ScenarioConsumer consumer(ConsumerSetup.Builder setup) {
    ConsumerSetup member =
        setup.consumerProperty(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, GROUP_INSTANCE_ID).build();
    return protectedHandler == null
        ? new ConsumerLoop(member, handler)
        : new DedupConsumer(member, protectedHandler);
  }

  @Override
  public void close() {
    if (executor != null) {
      executor.close();
    }
  }
}
