package io.consumerdedup.spring;

import io.consumerdedup.core.DedupAttemptsExhaustedException;
import io.consumerdedup.core.DedupException;
import io.consumerdedup.core.DedupKeyConflictException;
import io.consumerdedup.core.DedupKeyMalformedException;
import io.consumerdedup.core.DedupKeyMissingException;
import io.consumerdedup.core.DedupStoreDataException;
import io.consumerdedup.core.Disposition;
import java.lang.reflect.Method;
import java.util.List;
import org.jspecify.annotations.Nullable;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.ExceptionClassifier;
import org.springframework.kafka.listener.FailedBatchProcessor;
import org.springframework.util.ReflectionUtils;

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
 * the record was marked FAILED and a retry is allowed. {@link WrappedConsumerCastException} is
 * retryable, though its cause, a {@code ClassCastException}, is not by spring-kafka's default: the
 * handler looks through the causes of an exception it has no classification for, so that record
 * went to the recoverer at its first failure.
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

  private static final @Nullable Method FALLBACK_BATCH_HANDLER =
      ReflectionUtils.findMethod(FailedBatchProcessor.class, "getFallbackBatchHandler");

  static {
    if (FALLBACK_BATCH_HANDLER != null) {
      ReflectionUtils.makeAccessible(FALLBACK_BATCH_HANDLER);
    }
  }

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
    classifier.addRetryableExceptions(WrappedConsumerCastException.class);
    // spring-kafka hands its not-retryable exceptions to a batch handler's fallback (which retries
    // a batch failing without naming a record), but not its retryable ones: left out, a batch
    // listener's cast went to the recoverer at its first failure, the whole batch skipped.
    if (classifier instanceof FailedBatchProcessor batchProcessor
        && FALLBACK_BATCH_HANDLER != null
        && ReflectionUtils.invokeMethod(FALLBACK_BATCH_HANDLER, batchProcessor)
            instanceof ExceptionClassifier fallback) {
      fallback.addRetryableExceptions(WrappedConsumerCastException.class);
    }
    return classifier;
  }
}
