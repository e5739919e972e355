package io.consumerdedup.spring;

import io.consumerdedup.core.Disposition;
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
    String message =
        "@Idempotent batch listener "
            + listener
            + " stopped at "
            + KafkaUtils.format(record)
            + " (index "
            + index
            + " of the batch): "
            + cause.getMessage();
    return Disposition.of(cause) == Disposition.DEAD_LETTER
        ? new NotRetried(message, cause, record)
        : new BatchListenerFailedException(message, cause, record);
  }

  /**
   * The report of a record consumer-dedup says not to retry (its attempts spent, data a redelivery
   * cannot change), of a type of its own: spring-kafka's error handler classifies a failed record's
   * exception once, when it starts its back-off for it, and classifies again only when a later
   * failure of that record is of another type. Reported as every other stop, the record's last
   * failed attempt, first in the batch after an earlier attempt's failure, went on with the
   * back-off begun for that one: redelivered and its claim given back as spent, again and again,
   * until the handler's retries were used up, the records behind it waiting.
   */
  static final class NotRetried extends BatchListenerFailedException {
    private static final long serialVersionUID = 1L;

    NotRetried(String message, Throwable cause, ConsumerRecord<?, ?> record) {
      super(message, cause, record);
    }
  }
}
