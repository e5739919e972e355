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
import java.util.concurrent.atomic.AtomicBoolean;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
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

  private static final Logger log = LoggerFactory.getLogger(DedupErrorClassification.class);

  private static final AtomicBoolean fallbackNotReachedLogged = new AtomicBoolean();

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
    if (classifier instanceof FailedBatchProcessor batchProcessor) {
      retryCastsInFallbackOf(batchProcessor);
    }
    return classifier;
  }

  /**
   * The fallback has no public getter: looked up here, not at class loading, so a spring-kafka
   * without the method, or a JVM refusing access to it, costs only this classification, never the
   * error handler's setup.
   */
  private static void retryCastsInFallbackOf(FailedBatchProcessor batchProcessor) {
    RuntimeException refused = null;
    try {
      Method getter =
          ReflectionUtils.findMethod(FailedBatchProcessor.class, "getFallbackBatchHandler");
      if (getter != null) {
        ReflectionUtils.makeAccessible(getter);
        if (ReflectionUtils.invokeMethod(getter, batchProcessor)
            instanceof ExceptionClassifier fallback) {
          fallback.addRetryableExceptions(WrappedConsumerCastException.class);
        }
        return; // a fallback of the application's own that classifies nothing is left as it is
      }
    } catch (RuntimeException e) {
      refused = e;
    }
    if (fallbackNotReachedLogged.compareAndSet(false, true)) {
      log.warn(
          "Could not tell the fallback batch handler of {} to retry {} ({}): a batch listener"
              + " casting its Consumer to KafkaConsumer has its batch given to the recoverer at its"
              + " first failure, skipped at the defaults",
          batchProcessor.getClass().getName(),
          WrappedConsumerCastException.class.getSimpleName(),
          refused == null
              ? "this spring-kafka has no FailedBatchProcessor.getFallbackBatchHandler()"
              : refused.toString());
    }
  }
}
