package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.core.Outcome;
import io.consumerdedup.core.internal.FailureTexts;
import io.consumerdedup.core.internal.Latches;
import io.consumerdedup.kafka.DeadLetterHandler;
import io.consumerdedup.kafka.RecordProcessor;
import io.consumerdedup.kafka.ShareRecordWorker;
import io.consumerdedup.kafka.ShareRecordWorker.Decided;
import io.consumerdedup.kafka.internal.LostLines;
import io.consumerdedup.spring.autoconfigure.ShareDeserializationFailures.RejectedByPoll;
import io.consumerdedup.spring.internal.ConsumerPoll;
import io.consumerdedup.spring.internal.Coordinates;
import io.consumerdedup.spring.internal.CurrentRecordInterceptor;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BiFunction;
import java.util.function.Consumer;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.ShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.WakeupException;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.kafka.listener.AcknowledgingShareConsumerAwareMessageListener;
import org.springframework.kafka.listener.ListenerExecutionFailedException;
import org.springframework.kafka.support.KafkaUtils;
import org.springframework.kafka.support.ShareAcknowledgment;

/**
 * Stands between a spring-kafka 4.1 share container (in {@code ShareAckMode.MANUAL}) and its
 * {@code @Idempotent} listener, and acknowledges each record as {@code DedupShareLoop} does, with
 * the same core worker ({@link ShareRecordWorker}).
 *
 * <p>The container calls {@link #onShareRecord} on its consumer's thread; the record goes to that
 * consumer's worker thread, which calls the listener (through consumer-dedup's interceptor, which
 * claims the key, runs the method unless the key already succeeded, and writes the outcome), so
 * that the consumer thread stays free to apply the renewals that a third thread, the consumer's
 * keeper, sends every third of the lock duration through the record's {@link ShareAcknowledgment}
 * while its handler runs or it waits for another consumer's claim. A renewed record comes back in
 * the consumer's next poll, and so to {@link #onShareRecord} again, with a new acknowledgment: it
 * is recognised by its offset and the new acknowledgment kept, the listener not called again.
 *
 * <p>The worker takes the records handed to it and due together, and each such batch is a poll to
 * the interceptor ({@link Batch}): the listener's first call of the batch claims the keys of the
 * batch in one statement (derived as each call derives its key), each call takes its record's
 * claim, its SUCCESS is written in the background grouped with other marks, and the batch's end
 * gives back the claims not used and waits for the marks; a record whose SUCCESS is not written is
 * not accepted but processed again. With {@code consumer-dedup.claims-per-poll=false} the
 * interceptor ignores the batch: each call claims its key and writes its SUCCESS itself.
 */
final class DedupShareListener<K, V>
    implements AcknowledgingShareConsumerAwareMessageListener<K, V> {
  private static final Logger log = LoggerFactory.getLogger(DedupShareListener.class);

  /** The broker's default acquisition lock, until the consumer reports the group's. */
  private static final long DEFAULT_LOCK_NANOS = Duration.ofSeconds(30).toNanos();

  /**
   * A keeper with nothing in flight for this long stops, with its worker: the consumer it served
   * may be gone (a container stopped and started again makes new consumers). A record that comes
   * later gets a new keeper.
   */
  private static final long IDLE_NANOS = Duration.ofMinutes(2).toNanos();

  /** How long a poll of a closing consumer waits for renewed records to come back. */
  private static final Duration RENEWAL_POLL = Duration.ofMillis(50);

  /**
   * The shortest wait before a set-aside decision for a record the poll rejected is tried again:
   * its lock, which cannot be renewed, may end sooner than a third of a lock.
   */
  private static final long SET_ASIDE_SHORTEST_RETRY_NANOS = Duration.ofMillis(50).toNanos();

  /** Wakes a keeper when a renewed record is back. */
  private static final Object WAKE = new Object();

  private final AcknowledgingShareConsumerAwareMessageListener<K, V> listener;
  private final String listenerId;
  private final String groupId;
  private final DeadLetterHandler<K, V> deadLetters;
  private final Settings settings;
  private final Map<ShareConsumer<?, ?>, Keeper> keepers = new ConcurrentHashMap<>();
  private final AtomicInteger keeperNumbers = new AtomicInteger();
  private volatile boolean closed;

  /**
   * Set once the application's stop began ({@link #stopping}): no worker processes another record,
   * and each consumer's close waits for its worker until {@link #stopDeadlineNanos} at the latest.
   */
  private volatile boolean stopRequested;

  private volatile long stopDeadlineNanos;

  /** The worker's settings, those of {@code DedupShareLoop}. */
  record Settings(
      int maxAttempts,
      int deliveryCountLimit,
      Duration retryBackOff,
      Duration holdBackOff,
      Duration maxHoldBackOff,
      Duration closeTimeout) {}

  DedupShareListener(
      AcknowledgingShareConsumerAwareMessageListener<K, V> listener,
      String listenerId,
      String groupId,
      DeadLetterHandler<K, V> deadLetters,
      Settings settings) {
    this.listener = listener;
    this.listenerId = listenerId;
    this.groupId = groupId;
    this.deadLetters = deadLetters;
    this.settings = settings;
  }

  @Override
  public void onShareRecord(
      ConsumerRecord<K, V> record,
      @Nullable ShareAcknowledgment acknowledgment,
      ShareConsumer<?, ?> consumer) {
    if (acknowledgment == null) {
      throw new IllegalStateException(
          "Share container of listener "
              + listenerId
              + " is not in ShareAckMode.MANUAL; consumer-dedup sets it at start-up");
    }
    if (closed) {
      return; // the container is stopping: the broker delivers the record again
    }
    long lockNanos =
        consumer.acquisitionLockTimeoutMs().map(ms -> ms * 1_000_000L).orElse(DEFAULT_LOCK_NANOS);
    while (true) {
      Keeper keeper = keepers.computeIfAbsent(consumer, Keeper::new);
      if (closed) {
        // close() began meanwhile and may have passed over the keeper just made, whose threads
        // would then outlive the container: stopped here too (a second close does nothing more).
        keepers.remove(consumer, keeper);
        if (keeper.close(System.nanoTime())) {
          Thread.currentThread().interrupt();
        }
        return;
      }
      if (keeper.offer(record, acknowledgment, lockNanos)) {
        return;
      }
      keepers.remove(consumer, keeper); // it retired meanwhile
    }
  }

  /**
   * The application's stop began, before spring-kafka stops the share containers one after the
   * other, each until its consumers are closed: every worker stops after its record in hand now,
   * all together, and every consumer's close (and {@link #close()}) waits for its worker until one
   * close timeout from now. Told only as each consumer closed, the stop took the sum of the
   * containers' close timeouts, and a container not stopped yet started its handler on further
   * records meanwhile. The keepers go on renewing and acknowledging until their consumer closes;
   * the records no worker processes are given back by the close, as those undecided at a stop
   * always are.
   */
  void stopping() {
    stopDeadlineNanos = System.nanoTime() + settings.closeTimeout().toNanos();
    stopRequested = true;
    for (Keeper keeper : keepers.values()) {
      keeper.stopWorker();
    }
  }

  /**
   * When a close starting now stops waiting for the record in hand: after the close timeout, or
   * when the time {@link #stopping} set runs out, whichever comes first, leaving the close at least
   * a renewal poll's time to send what was decided.
   */
  private long closeDeadline() {
    long now = System.nanoTime();
    long deadline = now + settings.closeTimeout().toNanos();
    if (stopRequested && stopDeadlineNanos - deadline < 0) {
      deadline = Math.max(stopDeadlineNanos - now, RENEWAL_POLL.toNanos()) + now;
    }
    return deadline;
  }

  /** Stops the workers and keepers: their undecided records are delivered again by the broker. */
  void close() {
    closed = true;
    // An interrupt of the stopping thread asks for the stop under way: kept for the end, not let
    // cut the wait short. Cut short, the application's stop returned while handlers still ran, and
    // went on to close what they used, their outcomes not recorded.
    boolean interrupted = Thread.interrupted();
    // All stopped first, then waited for within one close timeout: each consumer's handler in hand
    // finishes alongside the others', so a stop takes the longest of them, not their sum.
    for (Keeper keeper : keepers.values()) {
      keeper.retire().stop();
    }
    long deadline = closeDeadline();
    for (Keeper keeper : keepers.values()) {
      interrupted |= keeper.close(deadline);
    }
    keepers.clear();
    if (interrupted) {
      Thread.currentThread().interrupt();
    }
  }

  /**
   * On {@code consumer}'s thread, as the container closes it: stops its worker after the record in
   * hand, waiting for it within the close timeout (counted from the application's stop, if that is
   * what closes it: {@link #stopping}), and hands its decisions over to be sent with the close
   * ({@link WrappedShareConsumers}). Without this, a record accepted or dead-lettered while the
   * container stopped came back after a restart: the container drops the acknowledgements still
   * queued for its consumer's thread when it stops.
   */
  void finish(ShareConsumer<?, ?> consumer) {
    Keeper keeper = keepers.remove(consumer);
    if (keeper != null) {
      keeper.finish(closeDeadline());
    }
  }

  /**
   * Called by a keeper about to replace the worker that an {@code Error} ended, before it takes its
   * lock to do so: lets a test stop the listener at that very moment.
   */
  volatile Runnable beforeWorkerReplaced = () -> {};

  /** Makes each keeper's thread, from its task and name: lets a test make one that cannot start. */
  volatile BiFunction<Runnable, String, Thread> keeperThreads = Thread::new;

  /** Called with each record a keeper hands to its worker, before it does: lets a test fail it. */
  volatile Consumer<ConsumerRecord<?, ?>> beforeHandOver = record -> {};

  /**
   * Called with each record a keeper acknowledges or renews, before it does: lets a test fail it.
   */
  volatile Consumer<ConsumerRecord<?, ?>> beforeAcknowledge = record -> {};

  /**
   * Called with each decision a keeper takes in from its worker, before it does: lets a test fail
   * it.
   */
  volatile Consumer<Decided> beforeDecide = decided -> {};

  /**
   * One worker's processor: each batch the worker takes is a poll to the interceptor ({@link
   * ConsumerPoll#ofShareBatch}). Used on the worker's thread only; a worker replaced after an Error
   * gets a new one.
   */
  private final class Batch implements RecordProcessor<K, V> {
    private @Nullable ConsumerPoll poll;
    private List<ConsumerRecord<K, V>> records = List.of();

    @Override
    public void prepare(List<ConsumerRecord<K, V>> batch) {
      settle(); // a batch left unsettled: its claims given back first
      // A record the deserializer rejected is dead-lettered without a call: no key claimed for it.
      records =
          batch.stream()
              .filter(record -> !ShareDeserializationFailures.undeserialized(record))
              .toList();
      poll = ConsumerPoll.ofShareBatch(records);
    }

    @Override
    public Outcome process(ConsumerRecord<K, V> record) {
      return DedupShareListener.this.process(record, poll);
    }

    /**
     * Gives back the batch's claims no call used and waits for its SUCCESS marks; the records whose
     * SUCCESS is not written, which the worker holds and processes again.
     */
    @Override
    public List<ConsumerRecord<K, V>> settle() {
      ConsumerPoll ending = poll;
      List<ConsumerRecord<K, V>> batch = records;
      poll = null;
      records = List.of();
      if (ending == null) {
        return List.of();
      }
      Set<Coordinates> unwritten = ending.endShareBatch();
      if (unwritten.isEmpty()) {
        return List.of();
      }
      List<ConsumerRecord<K, V>> unrecorded = new ArrayList<>();
      for (ConsumerRecord<K, V> record : batch) {
        if (unwritten.contains(Coordinates.of(record))) {
          unrecorded.add(record);
        }
      }
      return unrecorded;
    }
  }

  /**
   * Calls the listener on the worker's thread as the container would on its own, without the
   * consumer, which is not for other threads; {@code batch} is the records' poll to the
   * interceptor.
   */
  @SuppressWarnings("NullAway")
  private Outcome process(ConsumerRecord<K, V> record, @Nullable ConsumerPoll batch) {
    // The share container calls the listener whatever its ErrorHandlingDeserializer reported.
    ShareDeserializationFailures.refuseIfUndeserialized(record, groupId);
    @SuppressWarnings("unchecked")
    ConsumerRecord<Object, Object> any = (ConsumerRecord<Object, Object>) record;
    KafkaUtils.setConsumerGroupId(groupId);
    CurrentRecordInterceptor.deliver(any, batch);
    try {
      listener.onShareRecord(record, null, null);
      return Outcome.PROCESSED;
    } catch (ListenerExecutionFailedException e) {
      // The dead letter names what the listener threw, not spring-kafka's wrapper of it.
      if (e.getCause() instanceof RuntimeException cause) {
        throw cause;
      }
      if (e.getCause() instanceof Error error) {
        throw error;
      }
      throw e;
    } finally {
      CurrentRecordInterceptor.INSTANCE.afterRecord(any, null);
      KafkaUtils.clearConsumerGroupId();
    }
  }

  /** The record's delivery count; 0 if the consumer did not report one, as the worker counts. */
  private static int delivery(ConsumerRecord<?, ?> record) {
    return record.deliveryCount().map(Short::intValue).orElse(0);
  }

  /**
   * Whether {@code later} is the delivery {@code earlier} is of, renewed and back: the same count,
   * and for a record the deserializer rejected (0 on every delivery, its lock never renewed but
   * handed back as the same instance) the same instance; another is the broker's next delivery.
   */
  private static boolean sameDelivery(ConsumerRecord<?, ?> earlier, ConsumerRecord<?, ?> later) {
    if (delivery(earlier) != delivery(later)) {
      return false;
    }
    return !(earlier instanceof RejectedByPoll<?, ?> || later instanceof RejectedByPoll<?, ?>)
        || earlier == later;
  }

  /** Whether {@code decided} was made for this delivery of the record, not an earlier one. */
  private static boolean madeFor(Decided decided, ConsumerRecord<?, ?> record) {
    return delivery(record) == decided.deliveryCount()
        && lockEnds(record) == decided.lockEndsNanos();
  }

  /** The lock end a decision names the delivery by: 0 but for a record the poll rejected. */
  private static long lockEnds(ConsumerRecord<?, ?> record) {
    return record instanceof RejectedByPoll<?, ?> rejected ? rejected.lockEndsNanos() : 0;
  }

  private record Id(String topic, int partition, long offset) {
    static Id of(ConsumerRecord<?, ?> record) {
      return new Id(record.topic(), record.partition(), record.offset());
    }
  }

  private final class Entry {
    ConsumerRecord<K, V> record;
    ShareAcknowledgment acknowledgment;
    boolean held = true;
    long renewalSentNanos;
    @Nullable Decided decision;

    Entry(ConsumerRecord<K, V> record, ShareAcknowledgment acknowledgment) {
      this.record = record;
      this.acknowledgment = acknowledgment;
    }
  }

  /**
   * The records one consumer of the container handed over and that are not acknowledged for good:
   * sends their decided acknowledgements while it holds them, and renews the others' locks.
   */
  private final class Keeper implements Runnable {
    private final Map<Id, Entry> entries = new LinkedHashMap<>();
    private final LinkedBlockingQueue<Object> signals = new LinkedBlockingQueue<>();
    private final String name;
    private volatile ShareRecordWorker<K, V> worker;
    private final Thread thread;

    /** Reaches zero as {@link #run()} ends: nothing is renewed or sent by this keeper after. */
    private final CountDownLatch ended = new CountDownLatch(1);

    private final ShareConsumer<?, ?> consumer;
    private volatile boolean running = true;
    private volatile long lockNanos = DEFAULT_LOCK_NANOS;
    private long nextRenewalNanos;
    private long lastOfferNanos = System.nanoTime();
    private boolean retired;

    /**
     * The worker's decisions whose taking-in threw, in the order they came, tried again at {@link
     * #setAsideRetryNanos}, the soonest retry any of them needs; their records renewed meanwhile.
     * Under the keeper's lock.
     */
    private final List<Decided> setAside = new ArrayList<>();

    private long setAsideRetryNanos;

    /**
     * When the lock of the last record the poll rejected runs out (or ran out): until then, a new
     * record may have been fetched with it, its lock running from that fetch. Under the keeper's
     * lock.
     */
    private long rejectedLockEndsNanos = System.nanoTime();

    Keeper(ShareConsumer<?, ?> consumer) {
      this.consumer = consumer;
      name = "dedup-share-" + listenerId + "-" + keeperNumbers.getAndIncrement();
      worker = newWorker();
      thread = keeperThreads.apply(this, name + "-keeper");
      thread.setDaemon(true);
      try {
        thread.start();
      } catch (RuntimeException | Error e) {
        // An OutOfMemoryError, the JVM unable to create a native thread: nobody would ever stop
        // the worker just started, which outlived the container (stopped by the Error) and any
        // restart of it, one more thread where threads ran short.
        worker.close(Duration.ZERO);
        throw e;
      }
    }

    private ShareRecordWorker<K, V> newWorker() {
      ShareRecordWorker<K, V> made =
          new ShareRecordWorker<>(
              new Batch(),
              deadLetters,
              signals::add,
              // An Error that leaves no decision (one thrown as the batch settles) woke nobody:
              // the keeper replaced the worker only at its next renewal, a third of the lock
              // later, the records handed over meanwhile waiting.
              () -> signals.add(WAKE),
              settings.maxAttempts(),
              settings.deliveryCountLimit(),
              settings.retryBackOff(),
              settings.holdBackOff(),
              settings.maxHoldBackOff(),
              groupId,
              name + "-worker");
      if (stopRequested) {
        // A keeper made, or a worker replaced, after the application's stop began: it processes
        // nothing either.
        made.stop();
      }
      return made;
    }

    /**
     * Stops the current worker after its record in hand; under the keeper's lock, so that a worker
     * replacing it meanwhile (after an Error) is the one stopped, or is made stopped.
     */
    private synchronized void stopWorker() {
      worker.stop();
    }

    /**
     * On the container's consumer thread: a new record, or a renewed one back; false if this keeper
     * retired (idle), so that a new one takes the record.
     */
    boolean offer(ConsumerRecord<K, V> record, ShareAcknowledgment acknowledgment, long lock) {
      lockNanos = lock;
      synchronized (this) {
        if (retired) {
          return false;
        }
        lastOfferNanos = System.nanoTime();
        if (record instanceof RejectedByPoll<?, ?> rejected) {
          // Also a later delivery of one in hand, which takes that one's entry.
          rejectedLockEndsNanos = rejected.lockEndsNanos();
        }
        Id id = Id.of(record);
        Entry entry = entries.get(id);
        if (entry != null
            && entry.record instanceof RejectedByPoll<?, ?>
            && !sameDelivery(entry.record, record)) {
          // The broker's next delivery, its lock having run out while a dead letter was tried
          // (which is said then): taken for the earlier one renewed, it was never tried, and that
          // try's RELEASE released it, each slow failing try spending two deliveries.
          log.debug("{} delivered again: a new delivery, tried on its own", id);
          entries.remove(id);
          entry = null;
        }
        if (entry != null && !sameDelivery(entry.record, record)) {
          // A renewal counts no delivery: this is the broker's new delivery after the lock was
          // lost. The earlier one is forgotten unacknowledged (an acknowledgement names the offset,
          // so it would settle the new delivery) and the new one goes to the worker.
          log.warn(
              "{}-{}@{} (share group {}) came back as delivery {}, not as the renewed delivery {}:"
                  + " its lock was lost; handling the new delivery, and sending nothing decided"
                  + " for the earlier one",
              id.topic(),
              id.partition(),
              id.offset(),
              groupId,
              delivery(record),
              delivery(entry.record));
          entries.remove(id);
          entry = null;
        }
        if (entry != null) {
          entry.record = record;
          entry.acknowledgment = acknowledgment;
          entry.held = true;
        } else {
          boolean first = entries.isEmpty();
          long now = System.nanoTime();
          if (first) {
            nextRenewalNanos = now + lock / 3;
          }
          boolean renewNow = false;
          if (!(record instanceof RejectedByPoll<?, ?>) && now - rejectedLockEndsNanos < 0) {
            // Perhaps fetched with the record the poll rejected: kafka-clients kept it in its
            // buffer, unrenewable, until that one's REJECT, its lock running from the fetch. First
            // renewed a third of the lock after it was handed over, it lost its lock behind a dead
            // letter that took two thirds of it, and the broker delivered it again.
            nextRenewalNanos = now;
            renewNow = true;
          }
          Entry added = new Entry(record, acknowledgment);
          entries.put(id, added);
          // Under the keeper's lock, so that a worker being replaced cannot take it unnoticed.
          try {
            handOver(id, added);
          } catch (RuntimeException e) {
            // Not passed on: the container's recoverer would say it rejects the record (its
            // default; before the release, an exception here had the record archived unapplied),
            // and then fail to, the record released already.
            log.error(
                "Share listener {} could not hand {}-{}@{} to its worker; released, the broker"
                    + " delivers it again",
                listenerId,
                id.topic(),
                id.partition(),
                id.offset(),
                FailureTexts.loggable(e));
            return true;
          }
          if (!first && !renewNow) {
            return true; // the keeper already wakes for the renewal scheduled
          }
          // An idle keeper sleeps a third of the lock it knew, the broker's default (10 s) if it
          // started before this consumer's first record told the group's: woken, it renews on
          // time.
        }
      }
      signals.add(WAKE);
      return true;
    }

    /**
     * Under the keeper's lock: hands the entry's record to the worker; if that throws, forgets the
     * entry and releases the record if this consumer holds it, before the throwable goes on. Kept,
     * the record was renewed for good and handled by nobody, and the broker never gave it to
     * another consumer; forgotten but not released, the consumer could not poll again (every record
     * of its last poll must be acknowledged first). A record out for renewal is not released: it
     * comes back with the next poll, and goes to the worker then as a new entry.
     */
    private void handOver(Id id, Entry entry) {
      try {
        beforeHandOver.accept(entry.record);
        if (entry.record instanceof RejectedByPoll<?, ?> polled) {
          // Tried again only within its lock, which cannot be renewed, then released: kept
          // acquired like the others, it was tried again after its lock had run out, and its
          // consumer, which polls nothing while it holds such a record, waited for the lock.
          worker.submitUndeserializable(polled.raw(), polled.rejected(), polled.lockEndsNanos());
        } else {
          worker.submit(entry.record);
        }
      } catch (RuntimeException | Error e) {
        entries.remove(id);
        if (entry.held) {
          try {
            acknowledge(entry, AcknowledgeType.RELEASE);
          } catch (RuntimeException | Error releaseFailure) {
            e.addSuppressed(releaseFailure);
          }
        }
        throw e;
      }
    }

    /**
     * Marks this keeper stopping, under its lock, so that no worker replaces the one returned: the
     * last worker, which the caller stops. Whoever stops a keeper (its idle end, the container
     * closing its consumer, the listener closing) stops the worker this returns, never one read
     * before, which an Error may just have replaced.
     */
    private synchronized ShareRecordWorker<K, V> retire() {
      retired = true;
      return worker;
    }

    /** Stops this keeper if it has been idle long enough; whether it did. */
    private boolean retireIfIdle(long now) {
      synchronized (this) {
        if (!entries.isEmpty() || now - lastOfferNanos < IDLE_NANOS) {
          return false;
        }
        retired = true;
      }
      keepers.remove(consumer, this);
      running = false;
      worker.close(settings.closeTimeout());
      return true;
    }

    @Override
    public void run() {
      try {
        keep();
      } finally {
        ended.countDown();
      }
    }

    private void keep() {
      while (running) {
        try {
          long now = System.nanoTime();
          if (retireIfIdle(now)) {
            return;
          }
          // Before the step, which sends a decision taken in now at once.
          long retry = takeInSetAside(now, false);
          long wait = Math.min(step(now), retry);
          drain(signals.poll(Math.max(wait, 1_000_000L), TimeUnit.NANOSECONDS));
          replaceWorkerIfAnErrorStoppedIt();
        } catch (InterruptedException e) {
          return;
        } catch (RuntimeException | Error e) {
          // Nobody else acknowledges or renews this consumer's records: log, and go on. A second
          // OutOfMemoryError as the line is written, thrown from here, ended this thread, and the
          // consumer's records were never acknowledged nor renewed again, nor anything polled
          // after them: the line is lost instead.
          LostLines.error(
              log, "Share listener {}: could not acknowledge or renew records", listenerId, e);
        }
      }
    }

    private void drain(@Nullable Object first) {
      for (Object signal = first; signal != null; signal = signals.poll()) {
        if (signal instanceof Decided decided) {
          try {
            decide(decided);
          } catch (RuntimeException | Error e) {
            setAside(decided, e);
          }
        }
      }
    }

    /**
     * Keeps a decision whose taking-in threw, to be tried again a third of a lock later (sooner if
     * its lock cannot be renewed), its record renewed meanwhile. Lost with the throw (an
     * OutOfMemoryError), its record was renewed for good, never acknowledged, and its consumer
     * fetched nothing more; queued again with the signals, the next wait for a signal returned it
     * at once, and a taking-in that threw every time kept a core busy trying, an ERROR line each
     * time, thousands a second.
     */
    private synchronized void setAside(Decided decided, Throwable failure) {
      boolean kept;
      try {
        long retry = retryOf(decided, System.nanoTime());
        if (setAside.isEmpty() || retry - setAsideRetryNanos < 0) {
          setAsideRetryNanos = retry;
        }
        setAside.add(decided);
        kept = true;
      } catch (RuntimeException | Error lost) {
        // Nothing more to do without memory: the decision is lost, its record left undecided,
        // renewed until its consumer closes and gives it back, or handed to a worker replacing
        // one an Error ended, which runs it again.
        kept = false;
      }
      LostLines.error(
          log,
          kept
              ? "Share listener {}: could not take in a decision of its worker; tried again within"
                  + " a third of the lock, the record renewed meanwhile"
              : "Share listener {}: could not take in a decision of its worker, nor keep it to try"
                  + " again: the decision is lost, and its record given back as the consumer"
                  + " closes or run again by a new worker",
          listenerId,
          failure);
    }

    /**
     * When a set-aside decision is tried again: a third of a lock after {@code now}, sooner for a
     * record the poll rejected, whose lock cannot be renewed. Tried only after that lock ended, its
     * REJECT was refused, the broker delivered the record again, and another consumer, or a new
     * worker, wrote its dead letter a second time.
     */
    private long retryOf(Decided decided, long now) {
      long retry = now + lockNanos / 3;
      long lockEnds = decided.lockEndsNanos();
      if (lockEnds != 0 && lockEnds - now > 0) {
        long beforeLockEnds =
            Math.max(now + SET_ASIDE_SHORTEST_RETRY_NANOS, lockEnds - lockNanos / 10);
        if (beforeLockEnds - retry < 0) {
          retry = beforeLockEnds;
        }
      }
      return retry;
    }

    /**
     * Takes in the decisions set aside once their retry is due ({@code now}, unless {@code
     * regardless}); those that throw again wait another third of a lock (less for a lock that
     * cannot be renewed), one ERROR line for them all. Returns how long until the next retry.
     */
    private synchronized long takeInSetAside(long now, boolean regardless) {
      if (setAside.isEmpty()) {
        return Long.MAX_VALUE;
      }
      if (!regardless && now - setAsideRetryNanos < 0) {
        return setAsideRetryNanos - now;
      }
      Throwable firstFailure = null;
      setAsideRetryNanos = now + lockNanos / 3;
      for (Iterator<Decided> it = setAside.iterator(); it.hasNext(); ) {
        Decided decided = it.next();
        try {
          decide(decided);
          it.remove();
        } catch (RuntimeException | Error e) {
          if (firstFailure == null) {
            firstFailure = e;
          }
          long retry = retryOf(decided, now);
          if (retry - setAsideRetryNanos < 0) {
            setAsideRetryNanos = retry;
          }
        }
      }
      if (firstFailure != null) {
        LostLines.error(
            log,
            "Share listener {}: could not take in a decision of its worker again; tried again"
                + " within a third of the lock, the record renewed meanwhile",
            listenerId,
            firstFailure);
      }
      return setAside.isEmpty() ? Long.MAX_VALUE : setAsideRetryNanos - now;
    }

    /**
     * Whether the worker's decision for the entry's delivery waits among those set aside: the
     * record is decided (its listener ran, its outcome written or its dead letter sent), and a new
     * worker must not run it again.
     */
    private boolean decisionSetAside(Id id, Entry entry) {
      for (Decided decided : setAside) {
        if (decided.topic().equals(id.topic())
            && decided.partition() == id.partition()
            && decided.offset() == id.offset()
            && madeFor(decided, entry.record)) {
          return true;
        }
      }
      return false;
    }

    /**
     * A listener that throws an {@code Error} stops the worker, as it ends {@code DedupShareLoop};
     * here nobody would start another, and the records not decided would be renewed for good, never
     * handled. The record whose listener threw is already decided as a failed attempt (released, or
     * dead letter and reject once its attempts are spent), and the worker handled the rest of its
     * batch before it stopped; the records still undecided (waiting, or handed over meanwhile) go
     * to a new worker.
     */
    private void replaceWorkerIfAnErrorStoppedIt() {
      Error fatal = worker.fatal();
      if (fatal == null || !running) {
        return;
      }
      // The stopped worker sent its last decisions before it stopped: take them first.
      drain(signals.poll());
      beforeWorkerReplaced.run();
      boolean stopping;
      synchronized (this) {
        // Stopped meanwhile (the container closing its consumer, the listener closing as the
        // application stops), which stops the worker it saw and would never stop a new one: its
        // thread would outlive the container, and handle records after the stop.
        stopping = retired || closed;
        if (stopping) {
          running = false;
        } else {
          worker = newWorker();
          // Each handed over, whatever the others do: a record left out would never be handled,
          // the new worker being sound, nor given to another consumer.
          for (Map.Entry<Id, Entry> undecided : List.copyOf(entries.entrySet())) {
            Id id = undecided.getKey();
            if (undecided.getValue().decision != null
                || decisionSetAside(id, undecided.getValue())) {
              continue;
            }
            try {
              handOver(id, undecided.getValue());
            } catch (RuntimeException | Error e) {
              log.error(
                  "Share listener {} could not hand {}-{}@{} to its new worker; the broker"
                      + " delivers it again",
                  listenerId,
                  id.topic(),
                  id.partition(),
                  id.offset(),
                  FailureTexts.loggable(e));
            }
          }
        }
      }
      log.error(
          "Share listener {} threw {}: its record counts as a failed attempt; {}",
          listenerId,
          FailureTexts.describe(fatal),
          stopping
              ? "its container is stopping, and gives back the records not decided yet"
              : "the records not decided yet go to a new worker",
          FailureTexts.loggable(fatal));
    }

    private synchronized void decide(Decided decided) {
      beforeDecide.accept(decided);
      Entry entry = entries.get(new Id(decided.topic(), decided.partition(), decided.offset()));
      // A decision made from an earlier delivery's count (a RELEASE on what is now the last
      // delivery archives the record without its dead letter) is not sent for a later one; nor,
      // for a record the poll rejected, whose deliveries all count 0, one made for another lock.
      if (entry != null && madeFor(decided, entry.record)) {
        entry.decision = decided;
      }
    }

    /**
     * Sends the due acknowledgements of held records, renews the held records' locks when due, and
     * forgets records whose renewal did not come back within a lock; how long to wait then.
     */
    private synchronized long step(long now) {
      for (Iterator<Entry> it = entries.values().iterator(); it.hasNext(); ) {
        Entry entry = it.next();
        Decided decision = entry.decision;
        if (entry.held && decision != null && now - decision.notBeforeNanos() >= 0) {
          try {
            acknowledge(entry, decision.type());
            it.remove();
          } catch (RuntimeException | Error e) {
            // Kept, renewed meanwhile, and sent again a third of a lock later, not at once in a
            // loop: forgotten, the record stayed unacknowledged in its consumer's last poll, and
            // the consumer could not poll again, every record after it held back.
            entry.decision = sendAt(decision, now + lockNanos / 3);
            log.error(
                "Share listener {}: could not acknowledge {}-{}@{}; tried again in a third of its"
                    + " lock",
                listenerId,
                entry.record.topic(),
                entry.record.partition(),
                entry.record.offset(),
                FailureTexts.loggable(e));
          }
        }
      }
      if (entries.isEmpty()) {
        return lockNanos / 3;
      }
      if (now - nextRenewalNanos >= 0) {
        forgetUnreturned(now);
        for (Entry entry : entries.values()) {
          if (entry.held) {
            entry.held = false;
            entry.renewalSentNanos = now;
            try {
              beforeAcknowledge.accept(entry.record);
              entry.acknowledgment.renew();
            } catch (RuntimeException | Error e) {
              // Still in hand, unacknowledged: renewed with the next renewals, not at once in a
              // loop. Forgotten as out for renewal, it stayed unacknowledged in its consumer's
              // last poll, and the consumer could not poll again.
              entry.held = true;
              log.error(
                  "Share listener {}: could not renew the lock of {}-{}@{}; tried again in a third"
                      + " of its lock",
                  listenerId,
                  entry.record.topic(),
                  entry.record.partition(),
                  entry.record.offset(),
                  FailureTexts.loggable(e));
            }
          }
        }
        nextRenewalNanos = now + lockNanos / 3;
      }
      long next = nextRenewalNanos;
      for (Entry entry : entries.values()) {
        if (entry.held && entry.decision != null && entry.decision.notBeforeNanos() - next < 0) {
          next = entry.decision.notBeforeNanos();
        }
      }
      return next - now;
    }

    /** Forgets the records whose renewal has not come back within a lock: no longer ours. */
    private void forgetUnreturned(long now) {
      for (Iterator<Map.Entry<Id, Entry>> it = entries.entrySet().iterator(); it.hasNext(); ) {
        Map.Entry<Id, Entry> e = it.next();
        Entry entry = e.getValue();
        if (entry.held || now - entry.renewalSentNanos <= lockNanos) {
          continue;
        }
        it.remove();
        // Its retries queued in the worker would run for a record no longer ours, and write a
        // second dead letter beside that of its next delivery.
        worker.abandon(entry.record);
        Id id = e.getKey();
        log.warn(
            "The acquisition lock of {}-{}@{} (share group {}) was not renewed in time; the"
                + " broker delivers it again",
            id.topic(),
            id.partition(),
            id.offset(),
            groupId);
      }
    }

    private static Decided sendAt(Decided decision, long nanos) {
      return new Decided(
          decision.topic(),
          decision.partition(),
          decision.offset(),
          decision.deliveryCount(),
          decision.type(),
          nanos,
          decision.lockEndsNanos());
    }

    private void acknowledge(Entry entry, AcknowledgeType type) {
      beforeAcknowledge.accept(entry.record);
      if (consumer instanceof WrappedShareConsumers.Acknowledgements close) {
        close.handedOver(entry.record, type);
      }
      ShareAcknowledgment acknowledgment = entry.acknowledgment;
      switch (type) {
        case ACCEPT -> acknowledgment.acknowledge();
        case RELEASE -> acknowledgment.release();
        case REJECT -> acknowledgment.reject();
        default -> acknowledgment.renew();
      }
    }

    /**
     * On the consumer's thread, which sends nothing meanwhile: stops the worker and this keeper,
     * then hands every decided record over to be sent with the close; the undecided ones the
     * closing consumer gives back to the broker. A record out for renewal is handed over too: the
     * keeper goes on renewing while the worker finishes, and those renewals stay queued for this
     * very thread, which never sends them, so such a record is still the consumer's to acknowledge
     * (one whose renewal did reach the broker is refused by the consumer, and comes again).
     */
    void finish(long deadline) {
      ShareRecordWorker<K, V> last = retire();
      last.stop();
      // An interrupt of the consumer thread asks for the stop already under way: kept for the
      // end, not let cut the wait short. Cut short, the consumer closed while the handler still
      // ran, and gave its record back unacknowledged though the handler applied it.
      boolean interrupted = Thread.interrupted();
      // From here this thread renews the locks in the keeper's stead: the keeper's renewals go
      // through spring-kafka, which sends nothing any more, and two threads must not share the
      // consumer.
      running = false;
      thread.interrupt();
      interrupted |= Latches.awaitThroughInterrupts(ended, deadline);
      interrupted |= keepLocksUntilFinished(last, deadline);
      interrupted |= last.closeThroughInterrupts(deadline);
      // A handler still running now has its record given back by the close: said, as the share
      // loop says it, or the user saw a stop of 30 s and the record come again, and not why.
      last.warnIfStillRunning(settings.closeTimeout());
      Error fatal = last.fatal();
      if (fatal != null) {
        // The listener's Error: one whose printing threw ended this close here, and the records
        // decided last (a dead letter written, its REJECT) were left out of it, delivered again
        // after a restart and dead-lettered a second time.
        log.error(
            "Share listener {} stopped on an Error", listenerId, FailureTexts.loggable(fatal));
      }
      if (interrupted) {
        Thread.currentThread().interrupt();
      }
      drain(signals.poll());
      // A last try for the decisions set aside: one that throws again leaves its record to the
      // close, which gives it back.
      takeInSetAside(System.nanoTime(), true);
      synchronized (this) {
        for (Entry entry : entries.values()) {
          Decided decision = entry.decision;
          if (decision != null
              && consumer instanceof WrappedShareConsumers.Acknowledgements close) {
            close.handedOver(entry.record, decision.type()); // the container sends nothing now
          }
        }
        entries.clear();
      }
    }

    /**
     * On the consumer's thread as it closes, in the keeper's stead, until the worker has finished
     * the record in hand and the records it decided meanwhile are back from renewal, or until
     * {@code deadlineNanos}: acknowledges the decided records and renews the others' locks on the
     * consumer itself, and polls it to take the renewed records back, as {@code DedupShareLoop}
     * does as it stops. Without it, a handler that outlasted its record's lock while the container
     * stopped had the lock run out, the close's acknowledgement was refused, and the record came
     * again after a restart (a dead letter written twice). Returns early, leaving the wait to the
     * caller, if the consumer cannot be polled; whether the thread was interrupted meanwhile.
     */
    private boolean keepLocksUntilFinished(ShareRecordWorker<K, V> last, long deadlineNanos) {
      if (!(consumer instanceof WrappedShareConsumers.Acknowledgements handedOver)) {
        return false;
      }
      boolean interrupted = false;
      // The keeper's last renewals, and the acknowledgements it handed over, may still be queued
      // in spring-kafka unsent: made again on the consumer, or the consumer refuses to poll.
      boolean first = true;
      boolean setAsideTriedAfterEnd = false;
      while (System.nanoTime() - deadlineNanos < 0) {
        boolean workerEnded = last.isStopped(); // its last decisions are in the queue by then
        drain(signals.poll());
        long now = System.nanoTime();
        // Once the worker has ended, tried at once: a decision still set aside at the check below
        // counts as one, or this returned with its record out for renewal, and the close, handed
        // the decision by finish(), had it refused. Once only: each try that throws logs.
        takeInSetAside(now, workerEnded && !setAsideTriedAfterEnd);
        setAsideTriedAfterEnd |= workerEnded;
        boolean poll;
        synchronized (this) {
          if (workerEnded && !decidedOutForRenewal()) {
            return interrupted;
          }
          if (first) {
            handedOver.acknowledgeHandedOver();
          } else {
            forgetUnreturned(now);
          }
          boolean due = first || now - nextRenewalNanos >= 0;
          if (due || outForRenewal()) {
            // Every record of the consumer's last poll acknowledged, or it cannot poll again.
            renewOnConsumer(now, first);
          }
          if (due) {
            nextRenewalNanos = now + lockNanos / 3;
          }
          // Polled only to take renewed records back: a poll with none out would acquire new
          // records, which nobody handles now, a delivery counted for each.
          poll = outForRenewal();
        }
        first = false;
        if (!poll) {
          long wait = Math.min(RENEWAL_POLL.toNanos(), nextRenewalNanos - now);
          try {
            drain(signals.poll(Math.max(wait, 1_000_000L), TimeUnit.NANOSECONDS));
          } catch (InterruptedException e) {
            interrupted = true;
          }
          continue;
        }
        try {
          takeBack(consumer.poll(RENEWAL_POLL));
        } catch (WakeupException e) {
          // The container's stop request.
        } catch (InterruptException e) {
          Thread.interrupted();
          interrupted = true;
        } catch (KafkaException | IllegalStateException e) {
          log.warn(
              "Share listener {}: could not renew the locks of its records as its consumer closes;"
                  + " a record whose handler outlasts its lock is delivered again: {}",
              listenerId,
              e.toString());
          return interrupted;
        }
      }
      return interrupted;
    }

    /**
     * Acknowledges on the consumer the decided records held, and renews the others held ({@code
     * all}: every record, some perhaps out for renewal already, the renewal then refused).
     */
    private void renewOnConsumer(long now, boolean all) {
      for (Iterator<Entry> it = entries.values().iterator(); it.hasNext(); ) {
        Entry entry = it.next();
        if (!entry.held && !all) {
          continue;
        }
        Decided decision = entry.decision;
        AcknowledgeType type = decision == null ? AcknowledgeType.RENEW : decision.type();
        try {
          ownConsumer().acknowledge(entry.record, type);
        } catch (IllegalStateException e) {
          // Out for renewal already (its renewal was sent), or no longer this consumer's: back
          // with a poll, or forgotten after a lock.
          if (!entry.held) {
            continue;
          }
          log.debug("Could not acknowledge {} as the consumer closes: {}", Id.of(entry.record), e);
        }
        if (decision == null) {
          entry.held = false;
          entry.renewalSentNanos = now;
        } else {
          it.remove();
        }
      }
    }

    /**
     * Takes in what a poll returned as the consumer closes: renewed records are held again; a
     * record fetched now, or a later delivery of one whose lock was lost, has nobody to handle it
     * and is released at once, as the close would.
     */
    @SuppressWarnings("unchecked")
    private synchronized void takeBack(ConsumerRecords<?, ?> polled) {
      for (ConsumerRecord<?, ?> any : polled) {
        ConsumerRecord<K, V> record = (ConsumerRecord<K, V>) any;
        Entry entry = entries.get(Id.of(record));
        if (entry != null && sameDelivery(entry.record, record)) {
          entry.record = record;
          entry.held = true;
          continue;
        }
        if (entry != null) {
          entries.remove(Id.of(record)); // its lock was lost: nothing decided is sent for it
        }
        try {
          ownConsumer().acknowledge(record, AcknowledgeType.RELEASE);
        } catch (IllegalStateException e) {
          log.debug("Could not release {} as the consumer closes: {}", Id.of(record), e);
        }
      }
    }

    /** The consumer the container handed this keeper's records from. */
    @SuppressWarnings("unchecked")
    private ShareConsumer<K, V> ownConsumer() {
      return (ShareConsumer<K, V>) consumer;
    }

    private boolean outForRenewal() {
      for (Entry entry : entries.values()) {
        if (!entry.held) {
          return true;
        }
      }
      return false;
    }

    /**
     * Whether a decided record (its decision taken in, or set aside) is out for renewal: handed to
     * the close before it is back, its acknowledgement is refused.
     */
    private boolean decidedOutForRenewal() {
      for (Map.Entry<Id, Entry> e : entries.entrySet()) {
        Entry entry = e.getValue();
        if (!entry.held && (entry.decision != null || decisionSetAside(e.getKey(), entry))) {
          return true;
        }
      }
      return false;
    }

    /**
     * Stops this keeper and its worker, waiting for the worker's record in hand until {@code
     * deadlineNanos} whatever interrupts come; whether one came (the caller sets it again).
     */
    boolean close(long deadlineNanos) {
      running = false;
      ShareRecordWorker<K, V> last = retire();
      boolean interrupted = last.closeThroughInterrupts(deadlineNanos);
      thread.interrupt();
      Error fatal = last.fatal();
      if (fatal != null) {
        log.error(
            "Share listener {} stopped on an Error", listenerId, FailureTexts.loggable(fatal));
      }
      return interrupted;
    }
  }
}
