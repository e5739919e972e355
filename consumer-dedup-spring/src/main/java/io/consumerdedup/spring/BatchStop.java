package io.consumerdedup.spring;

import io.consumerdedup.core.internal.FailureTexts;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;
import org.springframework.kafka.listener.BatchListenerFailedException;
import org.springframework.kafka.support.KafkaUtils;

/**
 * Where an {@link Idempotent} batch listener's batch stops: the first record of the container's
 * batch that cannot be handled now, and why.
 *
 * @param index the record's index in the container's batch
 */
record BatchStop(int index, RuntimeException cause) {

  /** At {@code index}, for {@code error}; one that is not a RuntimeException is wrapped. */
  static BatchStop at(int index, @Nullable Throwable error) {
    return new BatchStop(
        index,
        error instanceof RuntimeException runtime
            ? runtime
            : new IllegalStateException(String.valueOf(error), error));
  }

  /**
   * Tells spring-kafka the record of the container's batch where processing stopped, and why. The
   * record itself, not its index: behind a record filter the listener's batch is a part of the
   * container's, and the error handler read the index in the whole poll, dead-lettering (and
   * committing past) whichever record stood there, an applied one as well.
   */
  BatchListenerFailedException failure(
      IdempotentListenerMethod listener, List<ConsumerRecord<Object, Object>> records) {
    ConsumerRecord<Object, Object> record = records.get(index);
    // spring-kafka's own type, by which its error handler finds the record: a dead letter names it
    // as the cause, as for any record a batch listener fails at, with consumer-dedup's exception in
    // its message and stack trace. A type of its own for a record not to be retried, to have the
    // handler classify it again, put a class of consumer-dedup's internals in dead letters;
    // RetryLaterErrorHandler has the handler start such a record's retries afresh instead.
    return new BatchListenerFailedException(
        "@Idempotent batch listener "
            + listener
            + " stopped at "
            + KafkaUtils.format(record)
            + " (index "
            + index
            + " of the batch): "
            // Described safely: when the method's exception could not give its message, the
            // container got that throw instead of this report and its error handler, told of no
            // record, gave the whole batch to its recoverer, records the method never saw too.
            + FailureTexts.messageOf(cause),
        cause,
        record);
  }
}
