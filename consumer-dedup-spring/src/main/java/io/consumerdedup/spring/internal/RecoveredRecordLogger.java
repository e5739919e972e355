package io.consumerdedup.spring.internal;

import io.consumerdedup.core.DedupAttemptsExhaustedException;
import io.consumerdedup.core.DedupException;
import io.consumerdedup.core.Disposition;
import io.consumerdedup.core.internal.FailureTexts;
import io.consumerdedup.kafka.internal.RecordSources;
import java.lang.reflect.Method;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.kafka.listener.BatchListenerFailedException;
import org.springframework.kafka.listener.CommonErrorHandler;
import org.springframework.kafka.listener.FailedRecordProcessor;
import org.springframework.kafka.listener.ListenerExecutionFailedException;
import org.springframework.kafka.listener.RetryListener;
import org.springframework.kafka.listener.TimestampedException;
import org.springframework.kafka.support.KafkaUtils;
import org.springframework.util.ReflectionUtils;

/**
 * Logs at ERROR each record an error handler gives up on and hands to its recoverer: a {@code
 * DeadLetterPublishingRecoverer} publishes without logging, so without this line a record could
 * leave for the dead-letter topic with nothing in the application's log. The line names the record
 * and why it was given up: consumer-dedup's exception (a key that cannot be derived, naming the key
 * expression or header and the cause; a payload conflict; attempts spent, with the last error), or
 * the listener's last exception, with its stack trace, once the error handler's retries are spent.
 *
 * <p>It also hears of recoveries that fail ({@link #takeFailedRecovery}): the wrappers of the error
 * handler holds such a record with a back-off, as a record to retry later, and logs it here, once
 * per streak at ERROR.
 *
 * <p>It is a spring-kafka {@link RetryListener}, added to a {@link FailedRecordProcessor} ({@code
 * DefaultErrorHandler}, {@code DefaultAfterRollbackProcessor}) after the application's own retry
 * listeners, which stay.
 */
public final class RecoveredRecordLogger implements RetryListener {
  private static final Logger log = LoggerFactory.getLogger(RecoveredRecordLogger.class);

  /** spring-kafka reads a processor's retry listeners for subclasses only; null if unreadable. */
  private static final @Nullable Method RETRY_LISTENERS = retryListenersGetter();

  private final boolean handlerFailuresGiveUp;

  private RecoveredRecordLogger(boolean handlerFailuresGiveUp) {
    this.handlerFailuresGiveUp = handlerFailuresGiveUp;
  }

  /**
   * Adds a logger to {@code processor}'s retry listeners, after those it has, unless it has one.
   *
   * @param retryTopicChain the processor serves a container of a {@code @RetryableTopic} chain,
   *     whose recoverer forwards a failing record to the next topic of the chain: only the records
   *     consumer-dedup sends straight to the dead-letter topic are given up there
   * @return whether the processor logs through such a logger now; false if its retry listeners
   *     cannot be read (nothing is changed then)
   */
  @SuppressWarnings("unchecked")
  public static boolean addTo(FailedRecordProcessor processor, boolean retryTopicChain) {
    List<RetryListener> existing = retryListeners(processor);
    if (existing == null) {
      return false;
    }
    if (existing.stream().noneMatch(RecoveredRecordLogger.class::isInstance)) {
      List<RetryListener> all = new ArrayList<>(existing);
      all.add(new RecoveredRecordLogger(!retryTopicChain));
      processor.setRetryListeners(all.toArray(new RetryListener[0]));
    }
    return true;
  }

  /**
   * Whether {@code handler} logs the records it gives up on through such a logger: a composite of
   * spring-kafka's if every handler inside it does ({@link ComposedErrorHandlers}).
   */
  public static boolean isAddedTo(CommonErrorHandler handler) {
    for (CommonErrorHandler inner : ComposedErrorHandlers.of(handler)) {
      if (!(inner instanceof FailedRecordProcessor processor)) {
        return false;
      }
      List<RetryListener> listeners = retryListeners(processor);
      if (listeners == null
          || listeners.stream().noneMatch(RecoveredRecordLogger.class::isInstance)) {
        return false;
      }
    }
    return true;
  }

  @SuppressWarnings("unchecked")
  private static @Nullable List<RetryListener> retryListeners(FailedRecordProcessor processor) {
    if (RETRY_LISTENERS == null) {
      return null;
    }
    try {
      return (List<RetryListener>) ReflectionUtils.invokeMethod(RETRY_LISTENERS, processor);
    } catch (RuntimeException e) {
      log.debug("Cannot read the retry listeners of {}", processor, e);
      return null;
    }
  }

  private static @Nullable Method retryListenersGetter() {
    try {
      Method getter = FailedRecordProcessor.class.getDeclaredMethod("getRetryListeners");
      ReflectionUtils.makeAccessible(getter);
      return getter;
    } catch (NoSuchMethodException | RuntimeException e) {
      log.debug("Cannot read the retry listeners of spring-kafka's error handlers", e);
      return null;
    }
  }

  /**
   * Logs at ERROR a record that an error handler which logs nothing of its own (not a {@link
   * FailedRecordProcessor}) is given because consumer-dedup says not to retry it.
   */
  public static void logHandedOver(
      ConsumerRecord<?, ?> record, Exception thrown, CommonErrorHandler handler) {
    DedupException dedup = Causes.first(thrown, DedupException.class);
    if (dedup != null && dedup.disposition() == Disposition.DEAD_LETTER) {
      logGivenUp(describe(record), dedup, "is not retryable, handed to " + handler);
    }
  }

  @Override
  public void failedDelivery(
      ConsumerRecord<?, ?> record, @Nullable Exception ex, int deliveryAttempt) {
    // Each failed attempt is logged where its claim is failed, with the key and the count.
  }

  @Override
  public void recovered(ConsumerRecord<?, ?> record, @Nullable Exception ex) {
    FAILING_RECOVERIES.remove(streakOf(record));
    recovered(describe(record), ex);
  }

  @Override
  public void recovered(ConsumerRecords<?, ?> records, @Nullable Exception ex) {
    records.forEach(record -> FAILING_RECOVERIES.remove(streakOf(record)));
    recovered(describe(records), ex);
  }

  private void recovered(String what, @Nullable Exception ex) {
    if (ex == null) {
      log.error("Gave up on {}, handed to the error handler's recoverer", what);
      return;
    }
    DedupException dedup = Causes.first(ex, DedupException.class);
    if (dedup != null && dedup.disposition() == Disposition.DEAD_LETTER) {
      logGivenUp(what, dedup, "handed to the error handler's recoverer");
    } else if (handlerFailuresGiveUp) {
      // Its retries are spent, or it does not retry this exception.
      Throwable listenerError = listenerError(ex);
      log.error(
          "Gave up on {}, handed to the error handler's recoverer: {}",
          what,
          // Thrown from here, after the recoverer published, spring-kafka takes the recovery for
          // failed and delivers the record again: published again at every delivery. Logback reads
          // the message of the line's exception, so one that cannot give it gets a stand-in.
          FailureTexts.describe(listenerError),
          FailureTexts.loggable(listenerError));
    }
  }

  @Override
  public void recoveryFailed(
      ConsumerRecord<?, ?> record, @Nullable Exception original, Exception failure) {
    FAILED_RECOVERY.set(new FailedRecovery(record, failure));
  }

  @Override
  public void recoveryFailed(
      ConsumerRecords<?, ?> records, @Nullable Exception original, Exception failure) {
    if (!records.isEmpty()) {
      FAILED_RECOVERY.set(new FailedRecovery(records.iterator().next(), failure));
    }
  }

  /**
   * A recovery that failed on this consumer thread: the record it was for (the first of a batch
   * recovered whole) and the recoverer's exception.
   */
  public record FailedRecovery(ConsumerRecord<?, ?> record, Exception failure) {}

  /**
   * The recovery that failed on this thread, heard by a logger of the error handler (or
   * after-rollback processor) that {@link io.consumerdedup.spring.RetryLaterErrorHandler} wraps: it
   * takes it after each handling to hold the record, and logs it ({@link #logRecoveryFailed}).
   */
  private static final ThreadLocal<FailedRecovery> FAILED_RECOVERY = new ThreadLocal<>();

  /**
   * The offset whose recovery failed last, per group and partition: a streak of failures of one
   * record is logged at ERROR once. It ends when a record of the partition is recovered.
   */
  private static final Map<StreakKey, Long> FAILING_RECOVERIES = new ConcurrentHashMap<>();

  private record StreakKey(@Nullable String group, String topic, int partition) {}

  private static StreakKey streakOf(ConsumerRecord<?, ?> record) {
    return new StreakKey(KafkaUtils.getConsumerGroupId(), record.topic(), record.partition());
  }

  /**
   * Notes a recovery that failed on this thread outside a logger: an error handler of the
   * application's own, not spring-kafka's, that threw handling {@code record}'s failure.
   */
  public static void noteFailedRecovery(ConsumerRecord<?, ?> record, Exception failure) {
    FAILED_RECOVERY.set(new FailedRecovery(record, failure));
  }

  /** The recovery that failed on this thread since the last call, or null; forgets it. */
  public static @Nullable FailedRecovery takeFailedRecovery() {
    FailedRecovery failed = FAILED_RECOVERY.get();
    FAILED_RECOVERY.remove();
    return failed;
  }

  /**
   * Logs a recovery that failed, its record held for {@code wait}: at ERROR for the first failure
   * of a streak on the record, at DEBUG for the next ones, so that a dead-letter topic refusing the
   * record (too large for it, not authorised, its broker down) does not flood the log. A record
   * that is not held ({@code wait} null: it comes again at once) is logged at ERROR each time.
   */
  public static void logRecoveryFailed(FailedRecovery failed, @Nullable Duration wait) {
    String what = describe(failed.record());
    if (wait == null) {
      log.error(
          "The error handler's recoverer failed for {}; not committing past it, it comes again: {}",
          what,
          FailureTexts.describe(failed.failure()),
          FailureTexts.loggable(failed.failure()));
      return;
    }
    ConsumerRecord<?, ?> record = failed.record();
    Long previous = FAILING_RECOVERIES.put(streakOf(record), record.offset());
    boolean firstOfStreak = previous == null || previous != record.offset();
    String message =
        "The error handler's recoverer failed for {}; not committing past it, trying again in {}:"
            + " {}";
    if (firstOfStreak) {
      log.error(
          message,
          what,
          wait,
          FailureTexts.describe(failed.failure()),
          FailureTexts.loggable(failed.failure()));
    } else if (log.isDebugEnabled()) {
      log.debug(
          message,
          what,
          wait,
          FailureTexts.describe(failed.failure()),
          FailureTexts.loggable(failed.failure()));
    }
  }

  /**
   * consumer-dedup's own refusals need no stack trace (the message says it all, the trace is at
   * DEBUG); attempts spent carry the handler's last exception, whose trace is logged. Each is
   * described safely, as in {@link #recovered(String, Exception)}.
   */
  private static void logGivenUp(String what, DedupException dedup, String fate) {
    Throwable handlerError =
        dedup instanceof DedupAttemptsExhaustedException ? dedup.getCause() : null;
    String message = FailureTexts.messageOf(dedup);
    if (handlerError != null) {
      log.error("Gave up on {}, {}: {}", what, fate, message, FailureTexts.loggable(handlerError));
    } else {
      log.error("Gave up on {}, {}: {}", what, fate, message);
      if (log.isDebugEnabled()) {
        log.debug("Stack trace of the refusal of {}", what, FailureTexts.loggable(dedup));
      }
    }
  }

  /** What the listener threw, without spring-kafka's wrappers. */
  private static Throwable listenerError(Throwable error) {
    Throwable current = error;
    while ((current instanceof ListenerExecutionFailedException
            || current instanceof BatchListenerFailedException
            || current instanceof TimestampedException)
        && current.getCause() != null) {
      current = current.getCause();
    }
    return current;
  }

  private static String describe(ConsumerRecord<?, ?> record) {
    return RecordSources.describe(record, KafkaUtils.getConsumerGroupId());
  }

  private static String describe(ConsumerRecords<?, ?> records) {
    List<ConsumerRecord<?, ?>> all = new ArrayList<>(records.count());
    records.forEach(all::add);
    if (all.isEmpty()) {
      return "an empty batch";
    }
    return "the "
        + all.size()
        + " records of a batch, "
        + describe(all.get(0))
        + " to "
        + RecordSources.coordinates(all.get(all.size() - 1));
  }
}
