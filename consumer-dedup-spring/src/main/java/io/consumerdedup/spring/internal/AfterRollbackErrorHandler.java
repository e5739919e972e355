package io.consumerdedup.spring.internal;

import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.core.log.LogAccessor;
import org.springframework.kafka.KafkaException;
import org.springframework.kafka.listener.CommonErrorHandler;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.listener.SeekUtils;

/**
 * The error handler of a container that runs in transactions and had none: every failure goes on to
 * the container's after-rollback processor, as spring-kafka has it for such a container, which it
 * gives no error handler. Having one anyway lets the failure reach the container as spring-kafka's
 * own "record in retry": only on that does a container waiting for out-of-order acknowledgments (a
 * listener returning a future or Mono, {@code asyncAcks}) forget the failed records' offsets. The
 * after-rollback path forgets none of them, so the consumer stayed paused for good behind a record
 * the after-rollback processor had sought back. {@link #failure} gives the after-rollback processor
 * the listener's exception back.
 */
public final class AfterRollbackErrorHandler implements CommonErrorHandler {
  private static final Logger log = LoggerFactory.getLogger(AfterRollbackErrorHandler.class);
  private static final LogAccessor SEEK_LOG = new LogAccessor(AfterRollbackErrorHandler.class);

  /** The listener's failure, on its way to the after-rollback processor. */
  private static final class HandedOver extends KafkaException {
    HandedOver(Exception failure) {
      super("Handed over to the after-rollback processor", Level.DEBUG, failure);
    }
  }

  @Override
  public boolean seeksAfterHandling() {
    return true;
  }

  /**
   * The container hands over the failed record and the rest of the poll, but the after-rollback
   * processor gets the failed one only: the others are sought back here, those of the failed
   * record's partition after it, so that a recovered record is not delivered again.
   */
  @Override
  public void handleRemaining(
      Exception thrownException,
      List<ConsumerRecord<?, ?>> records,
      Consumer<?, ?> consumer,
      MessageListenerContainer container) {
    SeekUtils.doSeeksToBegin(records.subList(1, records.size()), consumer, SEEK_LOG);
    throw inRetry(thrownException, records.subList(0, 1), container);
  }

  @Override
  public void handleBatch(
      Exception thrownException,
      ConsumerRecords<?, ?> data,
      Consumer<?, ?> consumer,
      MessageListenerContainer container,
      Runnable invokeListener) {
    List<ConsumerRecord<?, ?>> records = new ArrayList<>(data.count());
    data.forEach(records::add);
    if (records.isEmpty()) {
      throw thrownException instanceof RuntimeException runtime
          ? runtime
          : new KafkaException("Batch listener failed", thrownException);
    }
    throw inRetry(thrownException, records.subList(0, 1), container);
  }

  private static RuntimeException inRetry(
      Exception failure, List<ConsumerRecord<?, ?>> first, MessageListenerContainer container) {
    return RecordsInRetry.of(new HandedOver(failure), first, container);
  }

  /**
   * The listener's exception if {@code thrown} is this handler's hand-over, else {@code thrown}.
   */
  public static Exception failure(Exception thrown) {
    Throwable cause = thrown;
    while (cause != null && !(cause instanceof HandedOver)) {
      cause = cause.getCause() == cause ? null : cause.getCause();
    }
    return cause != null && cause.getCause() instanceof Exception failure ? failure : thrown;
  }

  /** What the container logs itself for an error handler it has none of. */
  @Override
  public void handleOtherException(
      Exception thrownException,
      Consumer<?, ?> consumer,
      MessageListenerContainer container,
      boolean batchListener) {
    log.error("Consumer exception", thrownException);
  }

  @Override
  public String toString() {
    return "AfterRollbackErrorHandler";
  }
}
