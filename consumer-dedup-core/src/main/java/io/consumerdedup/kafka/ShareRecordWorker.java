package io.consumerdedup.kafka;

import io.consumerdedup.core.internal.Latches;
import io.consumerdedup.kafka.ShareInFlight.Decision;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;

/**
 * The worker of {@link DedupShareLoop} for a share consumer that another component polls and
 * acknowledges, such as a spring-kafka share container: it processes the records handed to it on a
 * thread of its own and tells, for each, which acknowledgement to send and when, exactly as the
 * share loop decides (a duplicate or a record whose SUCCESS is written: ACCEPT; another consumer's
 * live claim or an unreachable store: none yet, the record processed again after the hold back-off
 * while its owner keeps it acquired with {@code RENEW}; a handler failure: RELEASE after the retry
 * back-off, or, once its attempts or deliveries are spent, the dead letter first and then REJECT;
 * no key or a conflict: the dead letter, then REJECT).
 *
 * <p>The records handed over one by one are processed in batches: when the worker takes a record,
 * it takes the others handed over and due with it, until the handover pauses for a millisecond, up
 * to {@link #MAX_BATCH}, and hands them to {@link RecordProcessor#prepare} together (one claim
 * statement for the lot), then to {@link RecordProcessor#settle} once processed; a record is
 * accepted only once settle reports its outcome recorded.
 *
 * <p>Whoever owns the consumer must renew the lock of every record handed over and not yet decided,
 * and send a decision only while it holds the record. Internal: consumer-dedup's Spring module uses
 * it; not API, may change in any release.
 */
public final class ShareRecordWorker<K, V> implements AutoCloseable {

  /**
   * The most records prepared together: a share consumer's default {@code max.poll.records}, the
   * batch {@link DedupShareLoop} claims at most.
   */
  public static final int MAX_BATCH = 500;

  /**
   * The acknowledgement decided for delivery {@code deliveryCount} (0 if the consumer reported
   * none) of the record at {@code topic}-{@code partition}@{@code offset}, to be sent not before
   * {@code notBeforeNanos} ({@link System#nanoTime()}). The owner must drop a decision whose
   * delivery count is not that of the delivery it holds: the record's lock was lost and the broker
   * delivered it again, and the decision was made from the earlier delivery's count. A record the
   * deserializer rejected counts 0 on every delivery: its decision names the delivery by {@code
   * lockEndsNanos}, the lock end it was handed over with ({@link #submitUndeserializable}), and the
   * owner drops one made for another delivery (0 for any other record).
   */
  public record Decided(
      String topic,
      int partition,
      long offset,
      int deliveryCount,
      AcknowledgeType type,
      long notBeforeNanos,
      long lockEndsNanos) {
    public Decided(
        String topic,
        int partition,
        long offset,
        int deliveryCount,
        AcknowledgeType type,
        long notBeforeNanos) {
      this(topic, partition, offset, deliveryCount, type, notBeforeNanos, 0);
    }
  }

  private final ShareWorker<K, V> worker;
  private final Thread thread;

  /** Reaches zero as the worker's thread ends, its last decisions given. */
  private final CountDownLatch ended = new CountDownLatch(1);

  /**
   * Starts the worker's thread.
   *
   * @param decided called on the worker's thread with each decision
   * @param onEnd called on the worker's thread as it ends, after its last decision (on an Error
   *     too, which may leave no decision to wake an owner that waits for one)
   * @param maxAttempts handler runs of one record before its dead letter
   * @param deliveryCountLimit the broker's delivery count limit: a failure on this delivery is
   *     dead-lettered instead of released
   */
  public ShareRecordWorker(
      RecordProcessor<K, V> processor,
      DeadLetterHandler<K, V> deadLetters,
      Consumer<Decided> decided,
      Runnable onEnd,
      int maxAttempts,
      int deliveryCountLimit,
      Duration retryBackOff,
      Duration holdBackOff,
      Duration maxHoldBackOff,
      String groupId,
      String threadName) {
    Objects.requireNonNull(decided, "decided");
    Objects.requireNonNull(onEnd, "onEnd");
    this.worker =
        new ShareWorker<>(
            Objects.requireNonNull(processor, "processor"),
            Objects.requireNonNull(deadLetters, "deadLetters"),
            (Decision d) ->
                decided.accept(
                    new Decided(
                        d.id().topic(),
                        d.id().partition(),
                        d.id().offset(),
                        d.delivery(),
                        d.type(),
                        d.notBeforeNanos(),
                        d.lockEndsNanos())),
            maxAttempts,
            deliveryCountLimit,
            retryBackOff,
            holdBackOff,
            maxHoldBackOff,
            groupId,
            MAX_BATCH);
    this.thread =
        new Thread(
            () -> {
              try {
                worker.run();
              } finally {
                ended.countDown();
                onEnd.run();
              }
            },
            threadName);
    thread.setDaemon(true);
    thread.start();
  }

  /**
   * Processes {@code record} as soon as the worker gets to it. A delivery the worker already has
   * (the owner forgot it and took it back) is not processed twice: the copy in hand decides, or, if
   * decided already, its decision is given again. A later delivery of the offset supersedes an
   * earlier one the worker has, which is then not processed again.
   */
  public void submit(ConsumerRecord<K, V> record) {
    worker.submit(List.of(record));
  }

  /**
   * A record the consumer's deserializer rejected ({@code raw}: its bytes, headers and coordinates;
   * {@code reason}: the deserializer's error), whose lock the owner cannot renew and which runs out
   * at {@code lockEndsNanos} ({@link System#nanoTime()}): its dead letter is written ({@link
   * DeadLetterHandler#deadLetterUndeserializable}), then REJECT decided. A dead letter that cannot
   * be written is tried again after the hold back-off while that fits in the lock, then RELEASE is
   * decided, for another delivery: never REJECT without the dead letter.
   */
  public void submitUndeserializable(
      ConsumerRecord<byte[], byte[]> raw, Exception reason, long lockEndsNanos) {
    worker.submitUndeserializable(raw, reason, lockEndsNanos);
  }

  /**
   * The owner gave up the record's delivery (its lock was lost): the worker does not process it
   * again (no hold retried, no dead letter written again) unless it is submitted again.
   */
  public void abandon(ConsumerRecord<?, ?> record) {
    worker.abandon(record);
  }

  /** The Error a handler threw, which stopped the worker; null if none. */
  public @Nullable Error fatal() {
    return worker.fatal();
  }

  /**
   * Asks the worker to stop after the record in hand, without waiting: several workers stopped
   * first and then closed finish their handlers together, not one after the other.
   */
  public void stop() {
    worker.stop();
  }

  /**
   * Whether the worker's thread has ended (after a {@link #stop()}, or on an Error): it decides
   * nothing more, and its last decisions were given before this turned true.
   */
  public boolean isStopped() {
    return ended.getCount() == 0;
  }

  /**
   * Stops after the record in hand, waiting up to {@code timeout} for it; the records not processed
   * get no decision (the broker delivers them again).
   */
  public void close(Duration timeout) {
    worker.stop();
    try {
      ended.await(timeout.toNanos(), TimeUnit.NANOSECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /**
   * As {@link #close(Duration)}, waiting until {@code deadlineNanos} ({@link System#nanoTime()})
   * whatever interrupts come: an owner stopping on an interrupted thread must still let the record
   * in hand finish.
   *
   * @return whether the thread was interrupted meanwhile; the caller sets the interrupt again
   */
  public boolean closeThroughInterrupts(long deadlineNanos) {
    worker.stop();
    return Latches.awaitThroughInterrupts(ended, deadlineNanos);
  }

  /**
   * After a {@link #close(Duration)} that waited out {@code closeTimeout}: if the worker is still
   * running, says so at WARN (logger {@code DedupShareLoop}, as the share loop says it), naming the
   * record whose handler or dead letter runs, which its owner now gives back unacknowledged.
   */
  public void warnIfStillRunning(Duration closeTimeout) {
    if (!isStopped()) {
      worker.warnStoppingWithoutIt(closeTimeout);
    }
  }

  @Override
  public void close() {
    close(DedupShareLoop.DEFAULT_CLOSE_TIMEOUT);
  }
}
