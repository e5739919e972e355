package io.consumerdedup.spring.internal;

import io.consumerdedup.core.internal.Durations;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executor;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;
import org.jspecify.annotations.Nullable;
import org.springframework.core.log.LogAccessor;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.listener.SeekUtils;

/**
 * Makes a record that cannot be handled yet wait, the way spring-kafka's retry topics do: its
 * partition is sought back to it and paused for a back-off (doubling per consecutive hold of the
 * same record, up to a maximum), then resumed, so the record comes again. Nothing is committed past
 * it meanwhile, no attempt is counted, the consumer keeps polling its other partitions and stays in
 * its group. The back-off restarts with the next record of the partition.
 *
 * <p>The pause is asked of the container that consumes the partition now (a concurrent container's
 * child), and whether the partition is still paused is read from that container, never from a count
 * kept here: a rebalance or a stop and start hands the partition to a container without the pause,
 * and the next hold must pause it again. Resumes run on threads of their own, so a container busy
 * in {@code stop()} under its lifecycle lock delays no other container's resumes.
 */
public final class ContainerPartitionHolds {
  private static final LogAccessor LOG = new LogAccessor(ContainerPartitionHolds.class);

  /** Only times the resumes. */
  private static final ScheduledExecutorService TIMER = daemonTimer();

  /** Runs the resumes that are due, each on a thread that waits for no other container. */
  private static final ExecutorService RESUMER =
      Executors.newCachedThreadPool(daemon("consumer-dedup-partition-resumer"));

  private final Duration initialBackOff;
  private final Duration maxBackOff;
  private final Executor resumer;
  private final ScheduledExecutorService timer;
  private final Map<Key, Hold> holds = new ConcurrentHashMap<>();

  private record Key(String container, TopicPartition partition) {}

  /** One pause of a partition (each distinct), by the container that consumed it then. */
  private static final class Pause {
    final MessageListenerContainer owner;

    /** Undone by its hold at once: a resume of it the timer still runs later must not resume. */
    volatile boolean withdrawn;

    Pause(MessageListenerContainer owner) {
      this.owner = owner;
    }
  }

  private static final class Hold {
    final long offset;
    int count;
    @Nullable Pause pause;

    Hold(long offset) {
      this.offset = offset;
    }
  }

  public ContainerPartitionHolds(Duration initialBackOff, Duration maxBackOff) {
    this(initialBackOff, maxBackOff, RESUMER);
  }

  /** With the executor that runs the resumes: a test's can fail to, as a thread start can. */
  ContainerPartitionHolds(Duration initialBackOff, Duration maxBackOff, Executor resumer) {
    this(initialBackOff, maxBackOff, resumer, TIMER);
  }

  /**
   * With the timer of the resumes too: a test's can fail to schedule, as its thread's start can.
   */
  ContainerPartitionHolds(
      Duration initialBackOff,
      Duration maxBackOff,
      Executor resumer,
      ScheduledExecutorService timer) {
    this.resumer = Objects.requireNonNull(resumer, "resumer");
    this.timer = Objects.requireNonNull(timer, "timer");
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

  private static ScheduledExecutorService daemonTimer() {
    ScheduledThreadPoolExecutor executor =
        new ScheduledThreadPoolExecutor(1, daemon("consumer-dedup-partition-resume-timer"));
    executor.setRemoveOnCancelPolicy(true);
    return executor;
  }

  private static ThreadFactory daemon(String name) {
    return runnable -> {
      Thread thread = new Thread(runnable, name);
      thread.setDaemon(true);
      return thread;
    };
  }

  /**
   * Holds {@code records.get(0)}: seeks each partition of {@code records} back to its first record
   * (they were not processed) and pauses the first record's partition for the next back-off step. A
   * record held again while its partition is still paused (the error handler and the after-rollback
   * processor both see a rolled-back record) does not advance the back-off. A partition the
   * application paused itself is left to the application to resume.
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
    MessageListenerContainer owner = container.getContainerFor(first.topic(), first.partition());
    Pause pause;
    Duration wait;
    synchronized (this) {
      Hold previous = holds.get(key);
      boolean pausedByHold =
          previous != null && previous.pause != null && previous.pause.owner == owner;
      Hold hold = previous;
      if (hold == null || hold.offset != first.offset()) {
        hold = new Hold(first.offset());
        holds.put(key, hold);
      }
      if (owner.isPartitionPauseRequested(partition)) {
        if (!pausedByHold) {
          // The application paused it itself (the container's pausePartition): a resume after the
          // back-off would undo that pause. The record comes again when the application resumes.
          return backOff(Math.max(1, hold.count));
        }
        if (hold == previous) {
          return backOff(hold.count);
        }
      }
      hold.count++;
      pause = new Pause(owner);
      hold.pause = pause;
      wait = backOff(hold.count);
    }
    owner.pausePartition(partition);
    try {
      resumeAfter(wait, key, pause, partition);
    } catch (RuntimeException | Error notScheduled) {
      return withdraw(key, pause, partition, notScheduled);
    }
    return wait;
  }

  /**
   * The resume of {@code pause} could not be scheduled (the timer's thread could not be created:
   * {@code OutOfMemoryError: unable to create native thread}): nothing would ever resume the
   * partition, paused for good while its group counts it as consumed, and the hold's pause would
   * keep every later hold of the record from scheduling a resume. The pause is undone at once, so
   * the record comes again without its back-off; its next hold tries the timer again.
   */
  private Duration withdraw(Key key, Pause pause, TopicPartition partition, Throwable failure) {
    pause.withdrawn = true;
    synchronized (this) {
      Hold current = holds.get(key);
      if (current != null && current.pause == pause) {
        current.pause = null;
      }
    }
    pause.owner.resumePartition(partition);
    LOG.warn(
        failure,
        () ->
            "Could not time the resume of "
                + partition
                + " after its hold; resumed at once, the record comes again without waiting");
    return Duration.ZERO;
  }

  /**
   * A resume that could not start ({@code OutOfMemoryError: unable to create native thread}, an
   * executor shut down) or failed is tried again: nothing else resumes the partition, which stayed
   * paused for good, and the hold's pause made every later hold of the record leave it paused.
   */
  private void resumeAfter(Duration wait, Key key, Pause pause, TopicPartition partition) {
    timer.schedule(
        () -> {
          try {
            resumer.execute(() -> resume(key, pause, partition));
          } catch (RuntimeException | Error notStarted) {
            resumeFailed(key, pause, partition, notStarted);
          }
        },
        wait.toNanos(),
        TimeUnit.NANOSECONDS);
  }

  private void resumeFailed(Key key, Pause pause, TopicPartition partition, Throwable failure) {
    try {
      resumeAfter(initialBackOff, key, pause, partition);
    } catch (RuntimeException | Error notScheduled) {
      // The try again cannot be timed (an OutOfMemoryError on the timer's thread): thrown from
      // here, it ended the timer's task with the retry, and the partition stayed paused for good.
      resumeHere(key, pause, partition, notScheduled);
      return;
    }
    LOG.warn(
        failure,
        () ->
            "Could not resume " + partition + " after its hold; trying again in " + initialBackOff);
  }

  /** The last resort: resumes on this thread, which the owner's lifecycle lock may then hold up. */
  private void resumeHere(Key key, Pause pause, TopicPartition partition, Throwable notScheduled) {
    try {
      if (claimResume(key, pause)) {
        pause.owner.resumePartition(partition);
      }
      LOG.warn(
          notScheduled,
          () -> "Could not time the resume of " + partition + " after its hold; resumed it now");
    } catch (RuntimeException | Error failed) {
      failed.addSuppressed(notScheduled);
      LOG.error(
          failed,
          () ->
              "Could not resume "
                  + partition
                  + " after its hold: it stays paused until the container restarts or the"
                  + " record is held again");
    }
  }

  /**
   * Whether {@code pause} is still the one to resume: not withdrawn, nor followed by a later hold
   * on the same container, which resumes it in its own time.
   */
  private boolean claimResume(Key key, Pause pause) {
    if (pause.withdrawn) {
      return false;
    }
    synchronized (this) {
      Hold current = holds.get(key);
      if (current != null && current.pause == pause) {
        current.pause = null;
      } else if (current != null && current.pause != null && current.pause.owner == pause.owner) {
        return false;
      }
    }
    return true;
  }

  private void resume(Key key, Pause pause, TopicPartition partition) {
    try {
      if (!claimResume(key, pause)) {
        return;
      }
      pause.owner.resumePartition(partition);
    } catch (RuntimeException | Error failed) {
      resumeFailed(key, pause, partition, failed);
    }
  }

  private Duration backOff(int count) {
    return Durations.doubling(initialBackOff, maxBackOff, count);
  }
}
