package io.consumerdedup.spring;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;
import org.springframework.kafka.listener.BatchListenerFailedException;

/**
 * A batch listener's report of the record it failed at, a {@link BatchListenerFailedException}
 * whose index or record is one of the filtered list it was given: found in that list, so that it
 * can be passed on with the index of the container's batch, never as it is.
 */
final class BatchFailureIndex {
  private BatchFailureIndex() {}

  /**
   * The index, in the list the method was given, of the record it reports failing at with a {@link
   * BatchListenerFailedException}; -1 if it reports none, or one outside that list.
   */
  static int in(Throwable error, KeptBatchRecords kept) {
    BatchListenerFailedException failure = reported(error);
    if (failure == null) {
      return -1;
    }
    ConsumerRecord<?, ?> record = failure.getRecord();
    if (record != null) {
      for (int i = 0; i < kept.size(); i++) {
        ConsumerRecord<?, ?> candidate = kept.records.get(i);
        if (candidate.offset() == record.offset()
            && candidate.partition() == record.partition()
            && candidate.topic().equals(record.topic())) {
          return i;
        }
      }
      return -1;
    }
    int index = failure.getIndex();
    return index >= 0 && index < kept.size() ? index : -1;
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

  private static @Nullable BatchListenerFailedException reported(Throwable error) {
    int depth = 0;
    for (Throwable current = error;
        current != null && depth < 32;
        current = current.getCause(), depth++) {
      if (current instanceof BatchListenerFailedException failure) {
        return failure;
      }
    }
    return null;
  }
}
