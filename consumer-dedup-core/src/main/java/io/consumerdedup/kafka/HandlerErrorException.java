package io.consumerdedup.kafka;

import io.consumerdedup.core.internal.FailureTexts;

/**
 * An {@link Error} a record's handler threw, as the reason {@link DedupPollLoop} gives the {@link
 * DeadLetterHandler} when such a record has spent its attempts ({@link #getCause()} is the Error).
 */
public final class HandlerErrorException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  HandlerErrorException(Error error) {
    super("Handler threw " + FailureTexts.describe(error), error);
  }
}
