package io.consumerdedup.spring;

import io.consumerdedup.core.DedupInProgressException;
import io.consumerdedup.core.DedupKeyConflictException;
import io.consumerdedup.core.DedupKeyMalformedException;
import io.consumerdedup.core.DedupKeyMissingException;
import io.consumerdedup.core.DedupStoreDataException;
import org.springframework.kafka.listener.DefaultErrorHandler;

/**
 * Teaches a spring-kafka {@link DefaultErrorHandler} consumer-dedup's exceptions, keeping
 * everything else it was configured with (back-off, recoverer, other classifications):
 *
 * <ul>
 *   <li>{@link DedupInProgressException} is retryable: another consumer holds a live lease, so the
 *       record is retried with the handler's back-off;
 *   <li>{@link DedupKeyMissingException}, {@code DedupKeyMalformedException}, {@code
 *       DedupStoreDataException} and {@link DedupKeyConflictException} are not: a redelivery
 *       carries the same data, so the record goes straight to the recoverer (a {@code
 *       DeadLetterPublishingRecoverer}, or by default a log line naming topic-partition@offset) and
 *       the partition moves on.
 * </ul>
 *
 * Handler exceptions keep the handler's classification: the record was marked FAILED and a retry is
 * allowed.
 */
public final class DedupErrorClassification {
  private DedupErrorClassification() {}

  /** Adds consumer-dedup's classifications to {@code errorHandler}; returns it. */
  public static DefaultErrorHandler applyTo(DefaultErrorHandler errorHandler) {
    errorHandler.addRetryableExceptions(DedupInProgressException.class);
    errorHandler.addNotRetryableExceptions(
        DedupKeyMissingException.class,
        DedupKeyMalformedException.class,
        DedupKeyConflictException.class,
        DedupStoreDataException.class);
    return errorHandler;
  }
}
