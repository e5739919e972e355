package io.consumerdedup.kafka;

import io.consumerdedup.core.Disposition;
import io.consumerdedup.core.Outcome;
import java.util.List;
import java.util.OptionalInt;
import org.apache.kafka.clients.consumer.ConsumerRecord;

/**
 * What {@link DedupPollLoop} runs for each record: the record in, the outcome out. {@link
 * IdempotentRecordHandler} is the usual one; a plain lambda works too.
 *
 * <pre>{@code
 * RecordProcessor<String, String> audit = record -> {
 *   auditLog.append(record.value());
 *   return Outcome.PROCESSED;
 * };
 * }</pre>
 *
 * @param <K> the record key type
 * @param <V> the record value type
 */
@FunctionalInterface
public interface RecordProcessor<K, V> {

  /**
   * Processes one record. What the loop does with an exception is decided by {@link
   * Disposition#of(Throwable)}: consumer-dedup's exceptions say for themselves whether the record
   * is retried later or dead-lettered; any other exception is a handler failure, retried up to the
   * loop's attempt limit.
   *
   * @return PROCESSED if the work was applied, DUPLICATE if it had been applied before
   * @throws RuntimeException if the record could not be processed (classified as above)
   */
  Outcome process(ConsumerRecord<K, V> record);

  /**
   * How many times this record's business action has been attempted so far, counting earlier
   * processes and consumers (the attempt that just failed included); empty if unknown. The loop
   * asks only after a handler failure, and dead-letters the record once the larger of this and its
   * own count reaches its attempt limit, so a restart does not grant a failing record a fresh set
   * of attempts.
   *
   * <p>The default is empty: the loop then counts attempts in memory, from the start of the loop.
   *
   * @throws RuntimeException if the count cannot be read; the loop then uses its own count
   */
  default OptionalInt attempts(ConsumerRecord<K, V> record) {
    return OptionalInt.empty();
  }

  /**
   * Called with each poll's records, in the order the loop will offer them to {@link #process},
   * before the first of them: a processor may prepare them together. {@link
   * IdempotentRecordHandler} claims all their keys in one round trip. The loop may stop before the
   * last of them (a record held for a retry holds the rest of its partition); {@link #settle()}
   * follows either way. The default does nothing.
   */
  default void prepare(List<ConsumerRecord<K, V>> records) {}

  /**
   * Called after the loop has processed a poll's records, before it commits their offsets: a
   * processor that records outcomes in the background waits for them here, and gives back what it
   * prepared for records the loop did not get to.
   *
   * @return the processed records whose outcome is not recorded yet; the loop commits no offset
   *     past them and delivers them again after the hold back-off. The default: none.
   */
  default List<ConsumerRecord<K, V>> settle() {
    return List.of();
  }
}
