package io.consumerdedup.spring.internal;

import io.consumerdedup.core.internal.Durations;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;
import org.springframework.core.log.LogAccessor;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.listener.SeekUtils;

/**
 * Makes a record that cannot be handled yet wait, the way spring-kafka's retry topics do: its
 * partition is sought back to it and paused for a back-off (doubling per consecutive hold of the
 * same record, up to a maximum), then resumed, so the record comes again. Nothing is committed past
 * it meanwhile, no attempt is counted, the consumer keeps polling its other partitions and stays in
 * its group. The back-off restarts with the next record of the partition.
 */
public final class PartitionHolds {
  private static final LogAccessor LOG = new LogAccessor(PartitionHolds.class);

  /** Only flips resume requests, which the containers carry out on their own threads. */
  private static final ScheduledExecutorService RESUMER = resumer();

  private final Duration initialBackOff;
  private final Duration maxBackOff;
  private final Map<Key, Hold> holds = new ConcurrentHashMap<>();

  private record Key(String container, TopicPartition partition) {}

  private static final class Hold {
    final long offset;
    int count;
    boolean paused;

    Hold(long offset) {
      this.offset = offset;
    }
  }

  public PartitionHolds(Duration initialBackOff, Duration maxBackOff) {
    this.initialBackOff = Objects.requireNonNull(initialBackOff, "initialBackOff");
    this.maxBackOff = Objects.requireNonNull(maxBackOff, "maxBackOff");
    if (initialBackOff.isNegative()
        || initialBackOff.isZero()
        || initialBackOff.compareTo(maxBackOff) > 0) {
      throw new IllegalArgumentException(
          "the initial hold back-off ("
              + initialBackOff
              + ") must be positive and not exceed the max ("
              + maxBackOff
              + ")");
    }
  }

  private static ScheduledExecutorService resumer() {
    ScheduledThreadPoolExecutor executor =
        new ScheduledThreadPoolExecutor(
            1,
            runnable -> {
              Thread thread = new Thread(runnable, "consumer-dedup-partition-resumer");
              thread.setDaemon(true);
              return thread;
            });
    executor.setRemoveOnCancelPolicy(true);
    return executor;
  }

  /**
   * Holds {@code records.get(0)}: seeks each partition of {@code records} back to its first record
   * (they were not processed) and pauses the first record's partition for the next back-off step. A
   * record held again while its partition is still paused (the error handler and the after-rollback
   * processor both see a rolled-back record) does not advance the back-off.
   *
   * @return how long the partition stays paused
   */
  public Duration hold(
      List<? extends ConsumerRecord<?, ?>> records,
      Consumer<?, ?> consumer,
      MessageListenerContainer container) {
    ConsumerRecord<?, ?> first = records.get(0);
    @SuppressWarnings("unchecked")
    List<ConsumerRecord<?, ?>> remaining = (List<ConsumerRecord<?, ?>>) records;
    SeekUtils.doSeeksToBegin(remaining, consumer, LOG);
    TopicPartition partition = new TopicPartition(first.topic(), first.partition());
    Key key = new Key(container.getListenerId(), partition);
    Hold hold;
    Duration wait;
    synchronized (this) {
      hold = holds.get(key);
      if (hold == null || hold.offset != first.offset()) {
        hold = new Hold(first.offset());
        holds.put(key, hold);
      }
      if (hold.paused) {
        return backOff(hold.count);
      }
      hold.count++;
      hold.paused = true;
      wait = backOff(hold.count);
    }
    container.pausePartition(partition);
    Hold paused = hold;
    RESUMER.schedule(() -> resume(key, paused, container), wait.toNanos(), TimeUnit.NANOSECONDS);
    return wait;
  }

  private void resume(Key key, Hold hold, MessageListenerContainer container) {
    synchronized (this) {
      hold.paused = false;
      Hold current = holds.get(key);
      if (current != hold && current != null && current.paused) {
        return; // a later hold of the partition (after a rebalance) resumes it in its own time
      }
    }
    container.resumePartition(key.partition());
  }

  private Duration backOff(int count) {
    return Durations.doubling(initialBackOff, maxBackOff, count);
  }
}
