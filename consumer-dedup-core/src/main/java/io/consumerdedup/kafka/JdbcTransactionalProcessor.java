package io.consumerdedup.kafka;

import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.core.Disposition;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.jdbc.TransactionBoundDataSource;
import io.consumerdedup.kafka.internal.RecordSources;
import java.util.Objects;
import org.apache.kafka.clients.consumer.ConsumerRecord;

/**
 * Runs another {@link RecordProcessor} inside a JDBC transaction, one per record: mode {@link
 * DedupMode#TRANSACTIONAL} for {@link DedupPollLoop}. The transaction is opened by a {@link
 * TransactionBoundDataSource}; give that same DataSource to the {@link
 * io.consumerdedup.jdbc.JdbcDedupStore} of a TRANSACTIONAL executor and to the handler's own data
 * access, and the dedup row and the handler's writes commit or roll back together: exactly-once
 * effects on that database, with no window between the effect and SUCCESS.
 *
 * <pre>{@code
 * TransactionBoundDataSource transactions = TransactionBoundDataSource.of(pool);
 * IdempotentExecutor executor = IdempotentExecutor
 *     .builder(JdbcDedupStore.builder(transactions).build())
 *     .mode(DedupMode.TRANSACTIONAL)
 *     .build();
 * IdempotentRecordHandler<String, String> payments = IdempotentRecordHandler
 *     .<String, String>builder(executor)
 *     .bizType("payment")
 *     .key(KeyExtractors.header("order-no"))
 *     .groupId("billing")
 *     .handler(record -> ledger.charge(record.value()))   // writes through `transactions`
 *     .build();
 * DedupPollLoop<String, String> loop = DedupPollLoop
 *     .builder(consumerConfig, List.of("payments"),
 *         JdbcTransactionalProcessor.of(transactions, payments))
 *     .deadLetterHandler(KafkaDeadLetterPublisher.builder(dltProducer)
 *         .rawProducer(rawDltProducer)
 *         .groupId("billing")
 *         .build())
 *     .build();
 * }</pre>
 *
 * <p>For each record: begin; the wrapped processor claims the key and runs the handler; commit when
 * it returns (PROCESSED or DUPLICATE), and only then does the loop commit the offset. When it
 * throws, the transaction is rolled back and the same exception is rethrown, so the loop treats it
 * as {@link Disposition#of(Throwable)} says: a handler failure is retried, then dead-lettered. A
 * process that dies mid-record commits nothing: PostgreSQL rolls back the transaction of a
 * connection that goes away, and the redelivery applies the record once.
 *
 * <p>When the transaction cannot be opened or committed, this throws a {@link DedupStoreException}
 * naming the record, and the loop holds the record and tries it again later (a commit refused for
 * its data, such as a deferred constraint, is dead-lettered). If the commit's reply was lost the
 * commit may have happened: then the dedup row is there and the redelivery is a duplicate; if not,
 * the redelivery runs the handler again. Either way the effect is applied once.
 *
 * <p>A failing record's attempts are counted by the loop, in memory: the rollback of a failed
 * attempt removes its dedup row together with its writes, so the table holds no count of failed
 * attempts (a restart grants a failing record a fresh set of attempts).
 *
 * @param <K> the record key type
 * @param <V> the record value type
 */
public final class JdbcTransactionalProcessor<K, V> implements RecordProcessor<K, V> {
  private final TransactionBoundDataSource transactions;
  private final RecordProcessor<K, V> processor;

  private JdbcTransactionalProcessor(
      TransactionBoundDataSource transactions, RecordProcessor<K, V> processor) {
    this.transactions = transactions;
    this.processor = processor;
  }

  /**
   * Runs {@code processor} for each record in a transaction of {@code transactions}.
   *
   * @param transactions the DataSource that the TRANSACTIONAL executor's store and the handler's
   *     writes use
   * @param processor usually an {@link IdempotentRecordHandler} whose executor is in mode {@link
   *     DedupMode#TRANSACTIONAL} over {@code transactions}
   */
  public static <K, V> JdbcTransactionalProcessor<K, V> of(
      TransactionBoundDataSource transactions, RecordProcessor<K, V> processor) {
    return new JdbcTransactionalProcessor<>(
        Objects.requireNonNull(transactions, "transactions"),
        Objects.requireNonNull(processor, "processor"));
  }

  /**
   * Processes the record in a transaction: committed if the wrapped processor returns, rolled back
   * if it throws.
   *
   * @return what the wrapped processor returned, once committed
   * @throws RuntimeException what the wrapped processor threw, after the rollback
   * @throws DedupStoreException the transaction could not be opened or committed (see {@link
   *     TransactionBoundDataSource#inTransaction})
   * @throws IllegalStateException the thread is already in a transaction of {@code transactions}
   */
  @Override
  public Outcome process(ConsumerRecord<K, V> record) {
    try {
      return transactions.inTransaction(() -> processor.process(record));
    } catch (DedupStoreException e) {
      throw e.locatedAt(RecordSources.coordinates(record));
    }
  }

  @Override
  public String toString() {
    return "JdbcTransactionalProcessor[" + processor + "]";
  }
}
