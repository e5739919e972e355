package io.consumerdedup.kafka;

import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.core.Disposition;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.core.internal.AfterCommit;
import io.consumerdedup.jdbc.TransactionBoundDataSource;
import io.consumerdedup.kafka.internal.RecordSources;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.OptionalInt;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Runs another {@link RecordProcessor} inside JDBC transactions: mode {@link
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
 * <p>{@link #of} runs each poll in one transaction: begin; the wrapped processor claims all the
 * poll's keys together ({@link RecordProcessor#prepare}, one statement for an {@link
 * IdempotentRecordHandler}) and runs the handler for each record; one commit, and only then does
 * the loop commit the offsets. When a record throws, an {@link Error} included (or the commit
 * fails), everything is rolled back and the poll is run again at once, one transaction per record,
 * so that the record that fails is found and handled alone while the others commit: the loop then
 * treats its exception as {@link Disposition#of(Throwable)} says (a handler failure is retried,
 * then dead-lettered). {@link #perRecord} runs one transaction per record from the start.
 *
 * <p>In one transaction per record: begin; the wrapped processor claims the key and runs the
 * handler; commit when it returns (PROCESSED or DUPLICATE). When it throws, the transaction is
 * rolled back and the same exception is rethrown. A process that dies mid-poll commits nothing of
 * the open transaction: PostgreSQL rolls back the transaction of a connection that goes away, and
 * the redelivery applies each record once.
 *
 * <p>When the transaction cannot be opened or committed, this throws a {@link DedupStoreException}
 * naming the record, and the loop holds the record and tries it again later (a commit refused for
 * its data, such as a deferred constraint, is dead-lettered). If the commit's reply was lost the
 * commit may have happened: then the dedup row is there and the redelivery is a duplicate; if not,
 * the redelivery runs the handler again. Either way the effect is applied once.
 *
 * <p>A failing record's attempts are counted in memory: the rollback of a failed attempt removes
 * its dedup row together with its writes, so the table holds no count of failed attempts. This
 * processor counts them ({@link #attempts}) for as long as it lives, so that a loop that follows
 * one an {@link Error} ended, over the same processor, goes on counting (a restart of the process
 * grants a failing record a fresh set of attempts). A poll holding a record that failed an attempt
 * runs one transaction per record, so that the loop decides whether the record has attempts left
 * before its handler runs again. The count is dropped once the record commits or is dead-lettered
 * (the loop recognises this class for that: wrapped in another processor, a dead-lettered record
 * keeps its count): a replay of it gets its attempts again, and so does a redelivery after the
 * offset commit that followed its dead letter was lost. An {@link Error} as a record's own
 * transaction opens or ends is no attempt of the record, and ends the loop; one as the poll's
 * transaction opens or ends is not passed on: the poll runs again one transaction per record.
 *
 * @param <K> the record key type
 * @param <V> the record value type
 */
public final class JdbcTransactionalProcessor<K, V> implements RecordProcessor<K, V> {
  private static final Logger log = LoggerFactory.getLogger(JdbcTransactionalProcessor.class);

  private final TransactionBoundDataSource transactions;
  private final RecordProcessor<K, V> processor;
  private final boolean perPoll;

  /**
   * The handler failures of records whose transaction rolled back, by record: the table keeps no
   * count of them, and a loop's own count ends with the loop, which a handler's Error ends. Dropped
   * when the record commits or is dead-lettered ({@link #givenUp}); bounded, the eldest entries the
   * first to go.
   */
  private final Map<Offset, Integer> rolledBackFailures =
      new LinkedHashMap<>() {
        private static final long serialVersionUID = 1L;

        @Override
        protected boolean removeEldestEntry(Map.Entry<Offset, Integer> eldest) {
          return size() > MAX_REMEMBERED_FAILURES;
        }
      };

  private static final int MAX_REMEMBERED_FAILURES = 10_000;

  private record Offset(TopicPartition partition, long offset) {
    static Offset of(ConsumerRecord<?, ?> record) {
      return new Offset(new TopicPartition(record.topic(), record.partition()), record.offset());
    }
  }

  /**
   * The outcomes of the poll committed together by {@link #prepare}, per poll thread; absent when
   * its records run one transaction each.
   */
  @SuppressWarnings("ThreadLocalUsage") // per processor on purpose: its own poll, per loop thread
  private final ThreadLocal<@Nullable IdentityHashMap<ConsumerRecord<K, V>, Outcome>> committed =
      new ThreadLocal<>();

  private JdbcTransactionalProcessor(
      TransactionBoundDataSource transactions, RecordProcessor<K, V> processor, boolean perPoll) {
    this.transactions = Objects.requireNonNull(transactions, "transactions");
    this.processor = Objects.requireNonNull(processor, "processor");
    this.perPoll = perPoll;
  }

  /**
   * Runs {@code processor} over each poll in one transaction of {@code transactions}, falling back
   * to one transaction per record when a record of the poll fails.
   *
   * @param transactions the DataSource that the TRANSACTIONAL executor's store and the handler's
   *     writes use
   * @param processor usually an {@link IdempotentRecordHandler} whose executor is in mode {@link
   *     DedupMode#TRANSACTIONAL} over {@code transactions}
   */
  public static <K, V> JdbcTransactionalProcessor<K, V> of(
      TransactionBoundDataSource transactions, RecordProcessor<K, V> processor) {
    return new JdbcTransactionalProcessor<>(transactions, processor, true);
  }

  /**
   * Runs {@code processor} for each record in a transaction of its own: a commit per record, for
   * handlers whose records must not wait for the rest of their poll to commit.
   */
  public static <K, V> JdbcTransactionalProcessor<K, V> perRecord(
      TransactionBoundDataSource transactions, RecordProcessor<K, V> processor) {
    return new JdbcTransactionalProcessor<>(transactions, processor, false);
  }

  /**
   * Runs the whole poll in one transaction (for {@link #of}); if any record throws or the commit
   * fails, it is all rolled back, and {@link #process} runs each record in a transaction of its
   * own.
   */
  @Override
  public void prepare(List<ConsumerRecord<K, V>> records) {
    committed.remove();
    if (!perPoll || anyFailedBefore(records)) {
      // A record that failed an attempt is run alone, after the loop has checked that it has
      // attempts left: run in the poll's transaction, a record whose attempts were spent (its dead
      // letter not written yet, so sought back to) ran once more, committed, and was then
      // dead-lettered as well.
      return;
    }
    IdentityHashMap<ConsumerRecord<K, V>, Outcome> outcomes = new IdentityHashMap<>();
    // Rolled back, the poll is run again record by record, which tells the listener what it
    // meets: told now as well, a duplicate, a claim or a failure was counted twice.
    AfterCommit.Scope pollTry = AfterCommit.openRetriedOnRollback();
    boolean pollCommitted = false;
    try {
      transactions.inTransaction(
          () -> {
            processor.prepare(records);
            try {
              for (ConsumerRecord<K, V> record : records) {
                outcomes.put(record, processor.process(record));
              }
            } catch (RuntimeException | Error e) {
              settleAfter(e);
              throw e;
            }
            processor.settle();
            return outcomes;
          });
      pollCommitted = true;
    } catch (RuntimeException | Error e) {
      // An Error too (a handler's AssertionError or StackOverflowError): passed on, it ended the
      // loop before any record was reached, nothing of the poll committed, and the record never
      // counted as a failure, so every loop the application started ended on the same poll. Run
      // alone, the record meets it again, and the loop treats it as a handler's Error.
      log.debug(
          "A record of the poll failed in the poll's transaction, which was rolled back; running"
              + " each record in a transaction of its own",
          e);
      return;
    } finally {
      pollTry.end(pollCommitted);
    }
    committed.set(outcomes);
  }

  /** Whether a record of the poll failed an attempt that this processor rolled back. */
  private boolean anyFailedBefore(List<ConsumerRecord<K, V>> records) {
    synchronized (rolledBackFailures) {
      if (rolledBackFailures.isEmpty()) {
        return false; // the normal path: no key made per record
      }
      for (ConsumerRecord<K, V> record : records) {
        if (rolledBackFailures.containsKey(Offset.of(record))) {
          return true;
        }
      }
      return false;
    }
  }

  /** Lets the wrapped processor forget the poll after a failure, keeping the failure's report. */
  private void settleAfter(Throwable failure) {
    try {
      processor.settle();
    } catch (RuntimeException e) {
      failure.addSuppressed(e);
    }
  }

  @Override
  public List<ConsumerRecord<K, V>> settle() {
    committed.remove();
    return List.of();
  }

  /**
   * The outcome the poll's transaction committed for this record; otherwise processes the record in
   * a transaction of its own: committed if the wrapped processor returns, rolled back if it throws.
   *
   * @return what the wrapped processor returned, once committed
   * @throws RuntimeException what the wrapped processor threw, after the rollback
   * @throws DedupStoreException the transaction could not be opened or committed (see {@link
   *     TransactionBoundDataSource#inTransaction})
   * @throws io.consumerdedup.core.DedupConfigurationException the thread is already in a
   *     transaction of {@code transactions} (the handler opened one of its own): the record waits
   */
  @Override
  public Outcome process(ConsumerRecord<K, V> record) {
    IdentityHashMap<ConsumerRecord<K, V>, Outcome> poll = committed.get();
    Outcome outcome = poll == null ? null : poll.get(record);
    if (outcome != null) {
      // Committed with its poll. A record with a counted failure is not prepared with its poll
      // (prepare() returns), but another loop over this processor may have counted one meanwhile:
      // kept, it would be counted again for a replay of the record (its key forgotten).
      forgetFailures(record);
      return outcome;
    }
    Outcome processed;
    AtomicReference<@Nullable Error> processorError = new AtomicReference<>();
    try {
      processed =
          transactions.inTransaction(
              () -> {
                try {
                  return processor.process(record);
                } catch (Error e) {
                  processorError.set(e);
                  throw e;
                }
              });
    } catch (DedupStoreException e) {
      throw e.locatedAt(RecordSources.coordinates(record));
    } catch (RuntimeException e) {
      if (Disposition.of(e) == Disposition.HANDLER_FAILED) {
        countFailure(record);
      }
      throw e;
    } catch (Error e) {
      if (e != processorError.get()) {
        // An Error as the transaction opened (an OutOfMemoryError from the pool) or ended is no
        // attempt of the record, for this count nor for the loop's: taken for a handler's Error,
        // at the record's last attempt it dead-lettered a record whose handler never ran, or one
        // whose commit had reached the server, both applied and dead-lettered.
        ErrorsBesideHandlers.note(e);
      } else if (!ErrorsBesideHandlers.isBesideHandler(e)) {
        // Counted as the loop counts it, as a handler failure. Only here: the loop it ends
        // forgets its count, and the rollback left none in the table, so every loop that
        // followed counted the record's first attempt and never dead-lettered it. Not one the
        // wrapped handler met beside its handler (its claim's answer lost to it).
        countFailure(record);
      }
      throw e;
    }
    forgetFailures(record);
    return processed;
  }

  /**
   * The loop gave the record up (dead-lettered it): its failures are forgotten, so that a replay of
   * it (an operator rewinds the group) gets its attempts again.
   */
  void givenUp(ConsumerRecord<K, V> record) {
    forgetFailures(record);
  }

  private void forgetFailures(ConsumerRecord<K, V> record) {
    synchronized (rolledBackFailures) {
      rolledBackFailures.remove(Offset.of(record));
    }
  }

  private void countFailure(ConsumerRecord<K, V> record) {
    synchronized (rolledBackFailures) {
      rolledBackFailures.merge(Offset.of(record), 1, Integer::sum);
    }
  }

  /**
   * The failed attempts of the record that this processor ran and rolled back; empty if none. The
   * table holds none of them (see the class comment).
   */
  @Override
  public OptionalInt attempts(ConsumerRecord<K, V> record) {
    Integer failed;
    synchronized (rolledBackFailures) {
      failed = rolledBackFailures.get(Offset.of(record));
    }
    return failed == null ? OptionalInt.empty() : OptionalInt.of(failed);
  }

  @Override
  public String toString() {
    return "JdbcTransactionalProcessor[" + processor + "]";
  }
}
