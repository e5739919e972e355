package io.consumerdedup.kafka;

import io.consumerdedup.core.internal.Latches;
import io.consumerdedup.kafka.ShareInFlight.Decision;
import io.consumerdedup.kafka.internal.RecordSources;
import io.consumerdedup.kafka.internal.ShareFetches;
import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Function;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.consumer.ShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.WakeupException;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A loop over a Kafka share group (KIP-932, "queues": a {@link KafkaShareConsumer}) that runs each
 * record through a {@link RecordProcessor}, usually an {@link IdempotentRecordHandler}, and
 * acknowledges each record one by one. Needs kafka-clients 4.2 or later and a broker of Kafka 4.2
 * or later (share groups, and {@code AcknowledgeType.RENEW}).
 *
 * <p>In a share group several consumers take records of the same partition; each record is acquired
 * by one consumer under a time-limited lock ({@code group.share.record.lock.duration.ms}, 30 s by
 * default) and acknowledged: ACCEPT (done), RELEASE (deliver again, counting a delivery) or REJECT
 * (never again). After {@code group.share.delivery.count.limit} deliveries (5 by default) the
 * broker archives the record. The loop acknowledges:
 *
 * <ul>
 *   <li>a duplicate (its key already succeeded): ACCEPT;
 *   <li>a record whose handler ran: ACCEPT once its SUCCESS is written;
 *   <li>a record that cannot be handled yet (another consumer holds its key under a live lease, the
 *       dedup store does not answer): nothing yet. It stays acquired, its lock renewed ({@code
 *       RENEW}, which counts no delivery), and it is tried again after the hold back-off (1 s,
 *       doubling to 30 s), for as long as it takes: waiting never uses up the record's deliveries.
 *       Meanwhile this consumer takes no new records (the loop sends its renewals without a fetch,
 *       and fetches only once the poll in hand is acknowledged); the other consumers of the group
 *       go on;
 *   <li>a handler failure (the record is FAILED in the table): RELEASE after the retry back-off, so
 *       that a delivery to any consumer retries it; once the record's attempts are spent ({@link
 *       Builder#maxAttempts}, counted in the dedup table across consumers) or this is the last
 *       delivery the broker allows ({@link Builder#deliveryCountLimit}), the dead letter is written
 *       first, then REJECT: a failing record is never archived unseen;
 *   <li>no key, a malformed key, a conflicting payload: the dead letter first, then REJECT;
 *   <li>a key or value the deserializer rejects: its raw bytes are dead-lettered, on the worker
 *       thread as the other dead letters (a hanging send holds no stop past its bound), then
 *       REJECT; if that dead letter cannot be written, RELEASE. The record's lock cannot be renewed
 *       meanwhile (kafka-clients 4.2 takes one acknowledgement of such a record, and a RENEW would
 *       be that one): a dead letter that takes longer than the lock has the broker refuse the
 *       REJECT and deliver the record again; back at this loop, it is rejected without a second
 *       dead letter;
 *   <li>a handler that throws an {@link Error}: a handler failure of its record, as above; the
 *       worker handles the rest of the poll, then the loop ends and {@link #run()} throws the
 *       Error. The poll's records are not left to the broker on its account: Kafka counts each
 *       record the closing consumer gives back as a delivery, so a loop that ended on an Error
 *       again and again would have the broker archive a healthy record of its poll, unapplied. An
 *       Error met as the record's key is claimed, before its handler ran, is no attempt: the record
 *       is kept acquired and claimed again after the hold back-off, the loop going on; so are the
 *       poll's records when it is met as their keys are claimed together. Ended on it, the loop
 *       gave them back, a delivery counted each, until the broker archived them unapplied;
 *   <li>a dead-letter handler that throws an {@link Error} (an {@code OutOfMemoryError} as it
 *       copies a large record): a dead letter not written, tried again after the hold back-off as
 *       above, the loop going on; ended on it, the loop had its close give the record back, a
 *       delivery counted each time, until the broker archived it without its dead letter;
 *   <li>a deserializer that throws an {@link Error} (a {@code StackOverflowError} on a deeply
 *       nested payload): kafka-clients passes it on without the record, which cannot be
 *       dead-lettered then; the loop ends, {@link #run()} throws the Error, and an ERROR says so.
 *       The closing consumer gives the poll's records back, a delivery counted each: restarted on
 *       it again and again, the loop has the broker archive the record at the delivery count limit,
 *       without a dead letter. A deserializer should throw an exception instead.
 * </ul>
 *
 * <p>While the handler runs (on the loop's worker thread), the loop's thread renews the locks of
 * the poll's records every third of the lock duration, so a handler longer than the lock does not
 * get its record handed to another consumer. The dedup table's lease is renewed as well, so a copy
 * of the same key acquired elsewhere waits rather than runs.
 *
 * <p>The loop makes the consumer from {@code consumerConfig} in explicit acknowledgement mode
 * ({@code share.acknowledgement.mode=explicit}, set if absent), subscribes it and closes it when it
 * stops. {@link #run()} polls until {@link #close()} is called from another thread; the record in
 * hand is finished, the decided acknowledgements are sent, and the records not decided are left to
 * the broker, which delivers them again.
 */
public final class DedupShareLoop<K, V> implements Runnable, AutoCloseable {

  /** Default longest time one poll waits for records. */
  public static final Duration DEFAULT_POLL_TIMEOUT = LoopSettings.DEFAULT_POLL_TIMEOUT;

  /** Default number of times a failing handler runs for one record before it is dead-lettered. */
  public static final int DEFAULT_MAX_ATTEMPTS = LoopSettings.DEFAULT_MAX_ATTEMPTS;

  /**
   * The broker's default {@code group.share.delivery.count.limit}: a record delivered this many
   * times is archived instead of released.
   */
  public static final int DEFAULT_DELIVERY_COUNT_LIMIT = 5;

  /** Default wait before a failed record is released for another delivery. */
  public static final Duration DEFAULT_RETRY_BACKOFF = LoopSettings.DEFAULT_RETRY_BACKOFF;

  /** Default first wait before a record that could not be handled yet is tried again. */
  public static final Duration DEFAULT_HOLD_BACKOFF = LoopSettings.DEFAULT_HOLD_BACKOFF;

  /** Default longest wait before a record that could not be handled yet is tried again. */
  public static final Duration DEFAULT_MAX_HOLD_BACKOFF = LoopSettings.DEFAULT_MAX_HOLD_BACKOFF;

  /** Default longest time {@link #close()} waits for the loop to stop. */
  public static final Duration DEFAULT_CLOSE_TIMEOUT = LoopSettings.DEFAULT_CLOSE_TIMEOUT;

  /** The broker's default acquisition lock, until the consumer reports the group's. */
  private static final Duration DEFAULT_LOCK = Duration.ofSeconds(30);

  /** How long a poll waits for renewed records to come back. */
  private static final Duration RENEWAL_POLL = Duration.ofMillis(50);

  /**
   * What {@link #close()} waits beyond the loop's own bound on its stop (twice the close timeout):
   * a consumer's close may overrun the time it is given a little, and a starved thread more.
   */
  private static final Duration CLOSE_GRACE = Duration.ofSeconds(5);

  /**
   * Put in the decision queue by {@link #close()}, and as the worker's thread ends: a loop waiting
   * there for the worker's next decision (up to a third of the lock) wakes and sees the stop
   * request, or the worker's Error. No record has its id, so it decides nothing.
   */
  private static final Decision STOP_REQUEST =
      new Decision(new ShareInFlight.Id("", -1, -1), 0, AcknowledgeType.ACCEPT, 0);

  private static final Logger log = LoggerFactory.getLogger(DedupShareLoop.class);

  private final ShareConsumer<K, V> consumer;
  private final List<String> topics;
  private final String groupId;
  private final SharePolls<K, V> polls;
  private final Duration closeTimeout;
  private final LinkedBlockingQueue<Decision> decisions = new LinkedBlockingQueue<>();
  private final ShareWorker<K, V> worker;

  private final AtomicBoolean started = new AtomicBoolean();
  private final CountDownLatch finished = new CountDownLatch(1);
  private volatile boolean running = true;
  private volatile @Nullable Thread workerThread;

  // Touched by the loop's thread only.
  private final ShareInFlight<K, V> inFlight;
  private long lockNanos = DEFAULT_LOCK.toNanos();
  private long nextRenewalNanos;

  /**
   * Whether a poll met a record the deserializer rejected since the last poll that returned
   * records: see {@link #firstRenewal}.
   */
  private boolean behindRejected;

  /** When a record the deserializer rejected was fetched: its lock runs from then. */
  private final ShareFetches fetches = new ShareFetches();

  /** When the stop under way must be over, the consumer closed; set once the loop stops. */
  private long stopDeadlineNanos;

  private DedupShareLoop(
      Builder<K, V> builder,
      ShareConsumer<K, V> consumer,
      DeadLetterHandler<K, V> deadLetterHandler) {
    LoopSettings<K, V> settings = builder.settings;
    this.consumer = consumer;
    this.topics = builder.topics;
    this.groupId = builder.groupId;
    this.polls =
        new SharePolls<>(consumer, this::undeserializable, settings.pollTimeout(), groupId);
    this.closeTimeout = settings.closeTimeout();
    this.worker =
        new ShareWorker<>(
            builder.processor,
            deadLetterHandler,
            decisions::add,
            settings.maxAttempts(),
            builder.deliveryCountLimit,
            settings.retryBackOff(),
            settings.holdBackOff(),
            settings.maxHoldBackOff(),
            groupId,
            1); // each work is a whole poll, prepared as it came
    // A record the consumer no longer holds: its queued retries would run for a record no longer
    // ours.
    this.inFlight = new ShareInFlight<>(consumer, worker::abandon);
  }

  /**
   * Starts building a loop over a {@link KafkaShareConsumer} made from {@code consumerConfig} when
   * {@link Builder#build()} is called (its deserializers must produce {@code K} and {@code V}).
   *
   * @param consumerConfig must name the share group ({@code group.id}); {@code
   *     share.acknowledgement.mode} must be {@code explicit} or absent (then set to it)
   * @param processor what runs for each record: usually an {@link IdempotentRecordHandler}
   * @throws IllegalArgumentException the configuration has no {@code group.id}, or asks for
   *     implicit acknowledgement
   */
  public static <K, V> Builder<K, V> builder(
      Map<String, Object> consumerConfig,
      Collection<String> topics,
      RecordProcessor<K, V> processor) {
    return new Builder<>(consumerConfig, topics, processor);
  }

  /**
   * Polls and handles records until {@link #close()} is called or the thread is interrupted; then
   * finishes the record in hand (within the close timeout), sends the decided acknowledgements and
   * closes the consumer, all within twice the close timeout, even against a broker that does not
   * answer (acknowledgements not sent by then are lost: the broker delivers those records again).
   * An interrupt while it stops does not cut that short; an interrupt of either kind is set on the
   * thread again when this returns.
   *
   * @throws IllegalStateException if the loop was already started or closed
   * @throws Error what a handler threw, once the rest of its poll is handled and the consumer is
   *     closed; or what a poll threw (a deserializer's Error, which kafka-clients does not report
   *     with the record: it cannot be dead-lettered, and its delivery is spent), once the consumer
   *     is closed
   */
  @Override
  public void run() {
    if (!started.compareAndSet(false, true)) {
      throw new IllegalStateException("A DedupShareLoop runs once; this one was started or closed");
    }
    Thread workerThread =
        new Thread(
            () -> {
              try {
                worker.run();
              } finally {
                // An Error ends the worker with no decision to wake the loop, which waited up to a
                // third of the lock before it saw the Error and stopped.
                decisions.add(STOP_REQUEST);
              }
            },
            "dedup-share-worker-" + groupId);
    this.workerThread = workerThread;
    boolean interrupted = false;
    try {
      consumer.setAcknowledgementCommitCallback(ShareConsumerConfig.loggingRefusals(groupId));
      consumer.subscribe(topics);
      workerThread.start();
      log.info(
          "Consuming {} in share group {}: explicit acknowledgements, acquisition locks renewed"
              + " while records are handled or wait for another consumer's claim",
          topics,
          groupId);
      while (running && worker.fatal() == null) {
        try {
          cycle(false);
        } catch (WakeupException e) {
          if (running) {
            log.debug("Ignoring a wakeup that was not a stop request");
          }
        }
      }
    } catch (InterruptException e) {
      Thread.interrupted();
      interrupted = true;
      log.info("Share loop of {} interrupted; stopping", topics);
    } finally {
      running = false;
      worker.stop();
      // The whole stop is bounded, the consumer's last calls included: left to the consumer's
      // defaults (default.api.timeout.ms, 60 s, for the last commit; 30 s for its close), a broker
      // that stopped answering kept the loop stopping long after close() had given up waiting, and
      // the application closed its executor and DataSource under a loop still running.
      stopDeadlineNanos = System.nanoTime() + 2 * closeTimeout.toNanos();
      try {
        interrupted |= finishInHand(workerThread);
        inFlight.acknowledgeDecided(System.nanoTime(), true);
        interrupted |= sendLastAcknowledgements();
      } catch (RuntimeException e) {
        log.warn("Could not send the last acknowledgements of share group {}", groupId, e);
      } finally {
        try {
          consumer.close(untilStopDeadline());
        } catch (RuntimeException e) {
          log.warn("Could not close the consumer of share group {} cleanly", groupId, e);
        } finally {
          log.info("Stopped consuming {} in share group {}", topics, groupId);
          finished.countDown();
          if (interrupted) {
            Thread.currentThread().interrupt();
          }
        }
      }
    }
    Error fatal = worker.fatal();
    if (fatal != null) {
      throw fatal;
    }
  }

  /**
   * Keeps the locks renewed until the worker has finished the record in hand, and until the records
   * it decided are back from renewal, so that their acknowledgements can be sent; whether the
   * thread was interrupted meanwhile. An interrupt here asks for the stop already under way: it is
   * kept for the end of {@link #run()}, not let cut the stop short. Cut short, the handler's record
   * was given back unacknowledged though its handler ran (a delivery spent, a dead letter written
   * again), and the consumer's close, interrupted in turn, threw before the loop counted itself
   * finished, so that {@link #close()} waited out twice its timeout for a loop already gone.
   */
  private boolean finishInHand(Thread workerThread) {
    boolean interrupted = false;
    long deadline = System.nanoTime() + closeTimeout.toNanos();
    while (System.nanoTime() - deadline < 0) {
      if (!workerThread.isAlive()) {
        drainDecisions();
        if (!inFlight.decidedAwaitingRenewal()) {
          return interrupted;
        }
      }
      try {
        cycle(true);
      } catch (WakeupException e) {
        // The stop request itself.
      } catch (InterruptException e) {
        Thread.interrupted();
        interrupted = true;
      }
    }
    drainDecisions();
    if (workerThread.isAlive()) {
      worker.warnStoppingWithoutIt(closeTimeout);
    }
    return interrupted;
  }

  /**
   * Sends the acknowledgements made, and waits for the broker's answer; whether the thread was
   * interrupted meanwhile (see {@link #finishInHand}: the close that follows sends them then).
   */
  private boolean sendLastAcknowledgements() {
    try {
      try {
        consumer.commitSync(untilStopDeadline());
      } catch (WakeupException e) {
        // The stop request's wakeup, not yet consumed by a poll.
        consumer.commitSync(untilStopDeadline());
      }
      return false;
    } catch (InterruptException e) {
      Thread.interrupted();
      return true;
    }
  }

  /**
   * A record the poll met and the deserializer rejected: in flight until its dead letter is
   * written.
   */
  private void undeserializable(ConsumerRecord<byte[], byte[]> raw, Exception reason) {
    lockNanos = consumer.acquisitionLockTimeoutMs().map(ms -> ms * 1_000_000L).orElse(lockNanos);
    nextRenewalNanos = System.nanoTime() + lockNanos / 3;
    inFlight.addUndeserializable(raw);
    behindRejected = true;
    if (inFlight.deadLetteredBefore(raw)) {
      // Its dead letter is written: a second one, for the same bytes, is what a user would count.
      log.warn(
          "{} came back after this consumer rejected it too late (its lock had run out); its dead"
              + " letter was written then, so it is rejected without another",
          describe(raw));
      inFlight.decide(
          new Decision(
              ShareInFlight.Id.of(raw),
              ShareInFlight.delivery(raw),
              AcknowledgeType.REJECT,
              System.nanoTime()));
      return;
    }
    // Its lock, which cannot be renewed, counted from the fetch: a dead letter that fails is tried
    // again within it before the record is released, and none is written once it has run out.
    worker.submitUndeserializable(
        raw,
        reason,
        fetches.rejected(new TopicPartition(raw.topic(), raw.partition()), raw.offset())
            + lockNanos);
  }

  /**
   * One step: poll new records when none are in flight; else send the acknowledgements that are
   * decided and due, renew the locks when due (and fetch renewed records back), or wait for the
   * worker's next decision.
   */
  private void cycle(boolean stopping) {
    long now = System.nanoTime();
    if (inFlight.isEmpty()) {
      if (stopping) {
        sleep(RENEWAL_POLL);
        return;
      }
      fetches.pollStarts(System.nanoTime());
      ConsumerRecords<K, V> polled = polls.poll();
      List<ConsumerRecord<K, V>> fresh = inFlight.add(polled);
      fetches.returned(fresh, polled.count());
      if (!fresh.isEmpty()) {
        lockNanos =
            consumer.acquisitionLockTimeoutMs().map(ms -> ms * 1_000_000L).orElse(lockNanos);
        nextRenewalNanos = firstRenewal(System.nanoTime());
        worker.submit(fresh);
      }
      return;
    }
    drainDecisions();
    inFlight.acknowledgeDecided(now, false);
    if (inFlight.isEmpty()) {
      // The poll's last acknowledgements are sent now rather than with the next poll: a poll
      // that throws (a record the deserializer rejects) loses those it was to carry.
      consumer.commitAsync();
      inFlight.acknowledgementsSent();
      return;
    }
    boolean renewalDue = now - nextRenewalNanos >= 0;
    boolean pollDue = inFlight.awaitingRenewals() || renewalDue;
    if (pollDue && inFlight.holdsUndeserializable()) {
      // A record the deserializer rejected, whose lock cannot be renewed: a poll would send the
      // RELEASE the consumer holds for it, before its dead letter is written.
      if (renewalDue) {
        nextRenewalNanos = now + lockNanos / 3;
      }
      pollDue = false;
    }
    if (pollDue) {
      inFlight.renewHeld(now);
      if (inFlight.hasUnsentAcknowledgements()) {
        // The renewals, and the decisions acknowledged since the last poll: with no renewal made
        // (the records out for renewal that the broker refused and never hands back) those went
        // with the poll, which lost them when it threw for a record the deserializer rejected; a
        // rejected record's REJECT among them had it delivered again and dead-lettered twice.
        sendAcknowledgements(stopping);
      }
      fetches.pollStarts(System.nanoTime());
      ConsumerRecords<K, V> polled = polls.poll(RENEWAL_POLL);
      inFlight.acknowledgementsSent();
      List<ConsumerRecord<K, V>> fresh = inFlight.add(polled);
      fetches.returned(fresh, polled.count());
      if (!fresh.isEmpty()) {
        worker.submit(fresh);
      }
      for (ConsumerRecord<?, ?> lost : inFlight.dropUnreturned(now, lockNanos)) {
        log.warn(
            "The acquisition lock of {} was not renewed (it had run out, or the broker does not"
                + " renew locks: share groups need Kafka 4.2); the broker delivers it again",
            describe(lost));
      }
      if (now - nextRenewalNanos >= 0) {
        nextRenewalNanos = now + lockNanos / 3;
      }
      if (!fresh.isEmpty()) {
        long first = firstRenewal(now);
        if (first - nextRenewalNanos < 0) {
          nextRenewalNanos = first;
        }
      }
      return;
    }
    long wait = inFlight.nextDue(nextRenewalNanos) - now;
    if (stopping) {
      wait = Math.min(wait, RENEWAL_POLL.toNanos()); // to see the worker end
    }
    if (wait > 0) {
      try {
        Decision decision = decisions.poll(wait, TimeUnit.NANOSECONDS);
        if (decision != null) {
          inFlight.decide(decision);
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new InterruptException(e);
      }
    }
  }

  /**
   * When the locks of the records a poll just returned are first renewed: a third of the lock from
   * now, or at once after a record the deserializer rejected. kafka-clients keeps the records
   * fetched behind such a record in its buffer, unrenewable, until the records before it are
   * acknowledged and its own REJECT is sent; their locks run from that fetch, so after a dead
   * letter that took two thirds of the lock, a renewal a third of the lock after they were returned
   * came too late: the broker delivered them again.
   */
  private long firstRenewal(long nowNanos) {
    boolean late = behindRejected;
    behindRejected = false;
    return late ? nowNanos : nowNanos + lockNanos / 3;
  }

  /**
   * Sends the renewals and the decided acknowledgements on their own and waits for the broker's
   * answer, so that the poll that takes the renewed records back fetches nothing. A poll would send
   * them with a fetch, which acquires new records; kafka-clients keeps those in its buffer until
   * every record of the current poll is acknowledged, so behind a long handler, or a record waiting
   * for another consumer's claim, their locks ran out there, unseen, a delivery spent each time,
   * until the broker archived them unapplied. Waits at most a third of the lock; renewals that
   * could not be sent apart go with the next poll, as before, and records whose renewal never comes
   * back are left to {@link ShareInFlight#dropUnreturned}.
   */
  private void sendAcknowledgements(boolean stopping) {
    try {
      Duration wait = Duration.ofNanos(Math.max(lockNanos / 3, RENEWAL_POLL.toNanos()));
      if (stopping && untilStopDeadline().compareTo(wait) < 0) {
        wait = untilStopDeadline(); // a broker not answering must not hold the stop up
      }
      consumer.commitSync(wait);
    } catch (WakeupException | InterruptException e) {
      throw e; // a stop request, as from a poll
    } catch (KafkaException e) {
      // Not sent yet, or no answer in time: the next poll sends them, with its fetch.
      log.warn(
          "Could not send the acknowledgements of share group {} on their own: {}",
          groupId,
          e.toString());
    }
  }

  /**
   * What is left of the stop's time, at least one renewal poll's: the consumer's close still sends
   * what it can in that.
   */
  private Duration untilStopDeadline() {
    return Duration.ofNanos(
        Math.max(stopDeadlineNanos - System.nanoTime(), RENEWAL_POLL.toNanos()));
  }

  private void drainDecisions() {
    for (Decision decision = decisions.poll(); decision != null; decision = decisions.poll()) {
      inFlight.decide(decision);
    }
  }

  private static void sleep(Duration duration) {
    try {
      Thread.sleep(duration.toMillis());
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new InterruptException(e);
    }
  }

  private String describe(ConsumerRecord<?, ?> record) {
    return RecordSources.describe(record, groupId);
  }

  /**
   * Stops the loop and waits for it to finish the record in hand (up to the close timeout), send
   * its acknowledgements and close the consumer: the loop bounds all of that by twice the close
   * timeout, so that when this returns the consumer is closed. (A handler that outlasts the close
   * timeout may still run then, its record given back undecided.) Only a loop that overran that
   * bound by more than a few seconds (its thread starved) is still stopping then, which a WARN
   * says. A loop that never ran closes its consumer here, within twice the close timeout too.
   * Called from the handler (the loop's worker thread), it only asks the loop to stop. An interrupt
   * of the calling thread does not cut the wait short; it is set on the thread again on return.
   */
  @Override
  public void close() {
    running = false;
    if (finished.getCount() == 0) {
      return;
    }
    consumer.wakeup();
    decisions.add(STOP_REQUEST);
    if (Thread.currentThread() == workerThread) {
      // The loop waits for this handler before it acknowledges the handler's record: waiting here
      // for the loop would outlast its close timeout, and its consumer would give the record back.
      return;
    }
    // A caller already interrupted (a shutdown on a thread of an executor stopped with shutdownNow)
    // got close() back at once while the handler in hand ran, and went on to close the executor and
    // DataSource under it: its SUCCESS was never written. The interrupt is kept for when this
    // returns.
    boolean interrupted = Thread.interrupted();
    try {
      if (started.compareAndSet(false, true)) {
        try {
          // Bounded as a running loop's stop is: left to the consumer's default (30 s), a loop that
          // never ran kept close() waiting on a broker that does not answer well past the close
          // timeout the application had set.
          consumer.close(Duration.ofNanos(2 * closeTimeout.toNanos()));
        } finally {
          finished.countDown();
        }
        return;
      }
      interrupted |= awaitFinished();
    } finally {
      if (interrupted) {
        Thread.currentThread().interrupt();
      }
    }
  }

  /** Waits for the loop to finish within its bound; whether the thread was interrupted. */
  private boolean awaitFinished() {
    long deadline = System.nanoTime() + closeTimeout.toNanos() * 2 + CLOSE_GRACE.toNanos();
    boolean interrupted = Latches.awaitThroughInterrupts(finished, deadline);
    if (finished.getCount() > 0) {
      log.warn(
          "Share loop of {} did not stop within twice its close timeout of {}; it is still"
              + " stopping, its consumer not closed yet",
          topics,
          closeTimeout);
    }
    return interrupted;
  }

  /** Builds a {@link DedupShareLoop}; every setter validates its value at once. */
  public static final class Builder<K, V> {
    private final Map<String, Object> consumerConfig;
    private final List<String> topics;
    private final RecordProcessor<K, V> processor;
    private final String groupId;
    private final LoopSettings<K, V> settings = new LoopSettings<>();
    private int deliveryCountLimit = DEFAULT_DELIVERY_COUNT_LIMIT;

    private Builder(
        Map<String, Object> consumerConfig,
        Collection<String> topics,
        RecordProcessor<K, V> processor) {
      Objects.requireNonNull(consumerConfig, "consumerConfig");
      Objects.requireNonNull(topics, "topics");
      if (topics.isEmpty() || topics.stream().anyMatch(t -> t == null || t.isBlank())) {
        throw new IllegalArgumentException("topics must be non-blank names, was " + topics);
      }
      this.groupId = ShareConsumerConfig.groupOf(consumerConfig);
      this.consumerConfig = ShareConsumerConfig.explicitAcknowledgement(consumerConfig);
      this.topics = List.copyOf(topics);
      this.processor = Objects.requireNonNull(processor, "processor");
    }

    /**
     * Where records go that the loop gives up on, before they are rejected. Required: usually a
     * {@link KafkaDeadLetterPublisher} with a {@link KafkaDeadLetterPublisher.Builder#rawProducer
     * raw producer}.
     */
    public Builder<K, V> deadLetterHandler(DeadLetterHandler<K, V> deadLetterHandler) {
      settings.deadLetterHandler(deadLetterHandler);
      return this;
    }

    /**
     * How many times a failing handler runs for one record (the first attempt included) before the
     * record is dead-lettered, counting the attempts of every consumer that {@link
     * RecordProcessor#attempts} reports. Keep it below the {@link #deliveryCountLimit delivery
     * count limit}, or the last delivery dead-letters the record instead. Default {@value
     * #DEFAULT_MAX_ATTEMPTS}.
     */
    public Builder<K, V> maxAttempts(int maxAttempts) {
      settings.maxAttempts(maxAttempts);
      return this;
    }

    /**
     * The share group's delivery count limit ({@code group.share.delivery.count.limit} of the
     * broker, or the group's {@code share.delivery.count.limit}): a record whose handler fails on
     * this delivery is dead-lettered and rejected instead of released, since the broker would
     * archive it. Default {@value #DEFAULT_DELIVERY_COUNT_LIMIT}, the broker's default.
     */
    public Builder<K, V> deliveryCountLimit(int deliveryCountLimit) {
      if (deliveryCountLimit < 2) {
        throw new IllegalArgumentException(
            "deliveryCountLimit must be at least 2 (Kafka's minimum), was " + deliveryCountLimit);
      }
      this.deliveryCountLimit = deliveryCountLimit;
      return this;
    }

    /** Wait before a failed record is released. Default {@link #DEFAULT_RETRY_BACKOFF}. */
    public Builder<K, V> retryBackOff(Duration retryBackOff) {
      settings.retryBackOff(retryBackOff);
      return this;
    }

    /**
     * Wait before a record that cannot be handled yet (another consumer's live lease, the dedup
     * store or the dead-letter handler failing) is tried again, kept acquired meanwhile: {@code
     * initial}, doubling on each try, at most {@code max}. Defaults {@link #DEFAULT_HOLD_BACKOFF}
     * and {@link #DEFAULT_MAX_HOLD_BACKOFF}.
     */
    public Builder<K, V> holdBackOff(Duration initial, Duration max) {
      settings.holdBackOff(initial, max);
      return this;
    }

    /** Longest time one poll waits for records. Default {@link #DEFAULT_POLL_TIMEOUT}. */
    public Builder<K, V> pollTimeout(Duration pollTimeout) {
      settings.pollTimeout(pollTimeout);
      return this;
    }

    /**
     * Longest time {@link DedupShareLoop#close()} lets the handler in hand finish; the last
     * acknowledgements and the consumer's close get what is left of twice this. Default {@link
     * #DEFAULT_CLOSE_TIMEOUT}.
     */
    public Builder<K, V> closeTimeout(Duration closeTimeout) {
      settings.closeTimeout(closeTimeout);
      return this;
    }

    /**
     * Builds the loop and its consumer.
     *
     * @throws IllegalStateException no dead-letter handler was set, or kafka-clients is older than
     *     4.2 (no {@code AcknowledgeType.RENEW}, without which a waiting record would use up its
     *     deliveries)
     */
    public DedupShareLoop<K, V> build() {
      return build(KafkaShareConsumer::new);
    }

    /**
     * Builds the loop around the consumer {@code consumers} makes from the loop's configuration:
     * the tests' way to delay the loop's calls to a real consumer, as a stalled thread would.
     */
    DedupShareLoop<K, V> build(Function<Map<String, Object>, ShareConsumer<K, V>> consumers) {
      DeadLetterHandler<K, V> deadLetters =
          settings.requireDeadLetterHandler(
              "a record is rejected only once its dead letter is written"
                  + " (for example KafkaDeadLetterPublisher.builder(producer).build())");
      settings.warnIfUndeserializableCannotBeDeadLettered(
          log,
          "such a record is released after each try, an ERROR each time, until the broker"
              + " archives it at the group's delivery-count limit, without a dead letter");
      ShareConsumerConfig.requireRenew();
      return new DedupShareLoop<>(this, consumers.apply(consumerConfig), deadLetters);
    }
  }
}
