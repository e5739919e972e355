package io.consumerdedup.spring;

import io.consumerdedup.core.DedupException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.Disposition;
import io.consumerdedup.spring.internal.PollAwareConsumer;
import org.jspecify.annotations.Nullable;

/**
 * An {@link Idempotent} listener cast the {@code Consumer} it was given (its argument, or the
 * {@code KafkaHeaders.CONSUMER} header of its message) to {@code KafkaConsumer}: consumer-dedup
 * gives its listeners a wrapper of the container's consumer, which holds the commits made through
 * it until the record's outcome is written. Take the {@code Consumer} interface instead, which has
 * every method of {@code KafkaConsumer}. Its cause is the listener's {@code ClassCastException}.
 *
 * <p>{@link Disposition#HANDLER_FAILED}, and not a {@code DedupConfigurationException}, whose
 * records are held, never dead-lettered or skipped: this mistake is found by the listener, which
 * may have applied effects before the cast, so it is the listener's failure, recorded FAILED and
 * counted as an attempt. Held instead, such a listener re-applied its effects at every hold,
 * without end. The error handler retries it as it retries any failure of the listener ({@link
 * DedupErrorClassification}), then the record is given up as any record whose attempts are spent: a
 * bare {@code ClassCastException}, which spring-kafka does not retry, went to the recoverer at its
 * first failure, and at the defaults the record was skipped, never applied.
 */
public final class WrappedConsumerCastException extends DedupException {
  private static final long serialVersionUID = 1L;

  /**
   * Found in the message of any wording of the cast: {@code (KafkaConsumer) consumer} says "...
   * PollAwareConsumer cannot be cast to ...", {@code KafkaConsumer.class.cast(consumer)} "Cannot
   * cast ...PollAwareConsumer to ...". A {@code ClassCastException} without a message (the JVM's
   * fast throw in hot compiled code can drop it) is not recognised.
   */
  private static final String WRAPPER = PollAwareConsumer.class.getName();

  /** How deep a listener's exception is searched for the cast, as {@link Disposition#of}. */
  private static final int MAX_DEPTH = 32;

  private WrappedConsumerCastException(
      Object listener,
      ClassCastException cast,
      @Nullable DedupKey key,
      @Nullable String source,
      Throwable cause) {
    super(
        "Listener "
            + listener
            + " cast the Consumer it was given to a class it is not ("
            + cast.getMessage()
            + "): consumer-dedup gives an @Idempotent listener a wrapper of the container's"
            + " consumer, as its Consumer argument and as the KafkaHeaders.CONSUMER header of its"
            + " message, which holds the commits made through it until the record's outcome is"
            + " written. Use the org.apache.kafka.clients.consumer.Consumer interface, which has"
            + " every method of KafkaConsumer; the record is retried as for any failure of the"
            + " listener, up to its attempts",
        key,
        source,
        cause);
  }

  @Override
  public Disposition disposition() {
    return Disposition.HANDLER_FAILED;
  }

  /**
   * The failure to record and throw for {@code error}, which {@code listener} threw for the record
   * of {@code key}: this exception, caused by {@code error}, if a cast of consumer-dedup's consumer
   * wrapper failed in it; else {@code error} itself. An {@code Error} is passed on as it is, as
   * every {@code Error} of a listener is.
   *
   * <p>Never throws: it runs before the failure is recorded, and what it threw (an {@code
   * OutOfMemoryError} building the message) would leave the key unsettled, PROCESSING under a lease
   * renewed for the process's life. It is added to {@code error} as suppressed instead.
   */
  static Throwable naming(
      Throwable error, Object listener, @Nullable DedupKey key, @Nullable String source) {
    if (!(error instanceof Exception)) {
      return error;
    }
    try {
      return castOfTheWrapperIn(error, listener, key, source);
    } catch (RuntimeException | Error notNamed) {
      try {
        error.addSuppressed(notNamed);
      } catch (RuntimeException | Error ignored) {
        // The failure is still recorded, as it came.
      }
      return error;
    }
  }

  private static Throwable castOfTheWrapperIn(
      Throwable error, Object listener, @Nullable DedupKey key, @Nullable String source) {
    Throwable current = error;
    for (int depth = 0; current != null && depth < MAX_DEPTH; depth++) {
      if (current instanceof DedupException) {
        return error; // named already, or consumer-dedup's own failure, which says what to do
      }
      if (current instanceof ClassCastException cast
          && cast.getMessage() != null
          && cast.getMessage().contains(WRAPPER)) {
        return new WrappedConsumerCastException(listener, cast, key, source, error);
      }
      current = current.getCause();
    }
    return error;
  }
}
