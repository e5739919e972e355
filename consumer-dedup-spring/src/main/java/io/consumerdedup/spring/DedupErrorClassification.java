package io.consumerdedup.spring;

import io.consumerdedup.core.DedupAttemptsExhaustedException;
import io.consumerdedup.core.DedupException;
import io.consumerdedup.core.DedupKeyConflictException;
import io.consumerdedup.core.DedupKeyMalformedException;
import io.consumerdedup.core.DedupKeyMissingException;
import io.consumerdedup.core.DedupStoreDataException;
import io.consumerdedup.core.Disposition;
import java.util.List;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.ExceptionClassifier;

/**
 * Teaches a spring-kafka {@link DefaultErrorHandler} (or {@code DefaultAfterRollbackProcessor})
 * which of consumer-dedup's exceptions are {@link Disposition#DEAD_LETTER}: not retryable, since a
 * redelivery carries the same data (a missing or malformed key, a payload conflict, data the store
 * refuses) or the listener's attempts are spent. Such a record goes straight to the recoverer (a
 * {@code DeadLetterPublishingRecoverer}, or by default a log line naming topic-partition@offset)
 * and the partition moves on. Everything else it was configured with (back-off, recoverer, other
 * classifications) stays.
 *
 * <p>Records to {@link Disposition#RETRY_LATER} never reach the handler's retry counting: {@link
 * RetryLaterErrorHandler} holds them first. Handler exceptions keep the handler's classification:
 * the record was marked FAILED and a retry is allowed.
 */
public final class DedupErrorClassification {

  /** consumer-dedup's exceptions whose {@link DedupException#disposition()} is DEAD_LETTER. */
  static final List<Class<? extends DedupException>> DEAD_LETTER =
      List.of(
          DedupKeyMissingException.class,
          DedupKeyMalformedException.class,
          DedupKeyConflictException.class,
          DedupStoreDataException.class,
          DedupAttemptsExhaustedException.class);

  private DedupErrorClassification() {}

  /**
   * Adds consumer-dedup's classifications to {@code classifier}: a {@code DefaultErrorHandler}, a
   * {@code DefaultAfterRollbackProcessor}, or the {@code DefaultDestinationTopicResolver} of
   * {@code @RetryableTopic} (so such a record goes straight to the dead-letter topic instead of
   * through every retry topic); returns it.
   */
  @SuppressWarnings("unchecked")
  public static <T extends ExceptionClassifier> T applyTo(T classifier) {
    classifier.addNotRetryableExceptions(DEAD_LETTER.toArray(new Class[0]));
    return classifier;
  }
}
