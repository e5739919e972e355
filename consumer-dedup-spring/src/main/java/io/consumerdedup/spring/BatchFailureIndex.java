package io.consumerdedup.spring;

import io.consumerdedup.spring.internal.Causes;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;
import org.springframework.kafka.listener.BatchListenerFailedException;

/**
 * A batch listener's report of the record it failed at, a {@link BatchListenerFailedException}
 * naming its index or the record, found in a list of records: for an {@link Idempotent} batch
 * listener, in the filtered list it was given, so that the report is passed on with the index of
 * the container's batch, never as it is; for {@link RetryLaterErrorHandler}, in the container's
 * batch.
 */
final class BatchFailureIndex {
  private BatchFailureIndex() {}

  /**
   * The index, in {@code records}, of the record the listener reports failing at with a {@link
   * BatchListenerFailedException}; -1 if it reports none, or one outside that list.
   */
  static int in(Throwable error, List<? extends ConsumerRecord<?, ?>> records) {
    BatchListenerFailedException failure = reported(error);
    if (failure == null) {
      return -1;
    }
    ConsumerRecord<?, ?> record = failure.getRecord();
    if (record != null) {
      for (int i = 0; i < records.size(); i++) {
        ConsumerRecord<?, ?> candidate = records.get(i);
        if (candidate.offset() == record.offset()
            && candidate.partition() == record.partition()
            && candidate.topic().equals(record.topic())) {
          return i;
        }
      }
      return -1;
    }
    int index = failure.getIndex();
    return index >= 0 && index < records.size() ? index : -1;
  }

  /** What the method failed with at the record it reported, without its report. */
  static Throwable causeAt(Throwable error) {
    BatchListenerFailedException failure = reported(error);
    if (failure == null) {
      return error;
    }
    return failure.getCause() != null ? failure.getCause() : failure;
  }

  /**
   * What to throw for a failure {@link #in} finds no record of the list for: a report of a record
   * outside it, with its index, must not reach the container as such.
   */
  static Throwable untranslatable(Throwable error) {
    BatchListenerFailedException failure = reported(error);
    if (failure == null) {
      return error;
    }
    return new BatchListenerFailedException(
        "The listener failed at a record that is not in the batch it was given: "
            + failure.getMessage(),
        error,
        -1);
  }

  /**
   * What to throw for a failure reported at a record of a method whose own transaction then rolled
   * back: the records before that record are undone too, so the container must not commit them as
   * its index would have it, but retry the whole batch.
   */
  static Throwable rolledBackBefore(Throwable error) {
    BatchListenerFailedException failure = reported(error);
    return new BatchListenerFailedException(
        "The listener failed at a record, and its transaction rolled back the records before that"
            + " one too: the whole batch is retried: "
            + (failure != null ? failure.getMessage() : error),
        error,
        -1);
  }

  private static @Nullable BatchListenerFailedException reported(Throwable error) {
    return Causes.first(error, BatchListenerFailedException.class);
  }
}
