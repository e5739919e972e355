package io.consumerdedup.kafka;

import io.consumerdedup.core.Disposition;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.core.internal.Durations;
import io.consumerdedup.core.internal.FailureTexts;
import io.consumerdedup.core.internal.FirstFailure;
import io.consumerdedup.kafka.ShareInFlight.Decision;
import io.consumerdedup.kafka.ShareInFlight.Id;
import io.consumerdedup.kafka.internal.LostLines;
import io.consumerdedup.kafka.internal.RecordSources;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.OptionalInt;
import java.util.Set;
import java.util.concurrent.DelayQueue;
import java.util.concurrent.Delayed;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The thread of {@link DedupShareLoop} that runs the processor, so that the loop's thread stays
 * free to renew the acquisition locks of the records while a handler runs. It takes the records of
 * a poll together ({@link RecordProcessor#prepare}: one claim statement), processes them in order,
 * settles them (the SUCCESS marks written), and decides each record's acknowledgement:
 *
 * <ul>
 *   <li>a duplicate, or a record whose SUCCESS is written: ACCEPT;
 *   <li>retry later (another consumer's live claim, the store unreachable, an outcome not written
 *       yet): no acknowledgement; the record stays acquired (the loop renews its lock, which counts
 *       no delivery) and is processed again after the hold back-off, doubling;
 *   <li>a handler failure: RELEASE after the retry back-off, for another delivery; once the
 *       attempts are spent, or this delivery is the last the broker allows, the dead letter is
 *       written first, then REJECT;
 *   <li>not retryable (no key, a malformed key, a conflict): the dead letter first, then REJECT;
 *   <li>a record the deserializer rejected ({@link #submitUndeserializable}): its raw bytes
 *       dead-lettered, then REJECT; RELEASE if that dead letter cannot be written.
 * </ul>
 *
 * A dead letter that cannot be written is tried again after the hold back-off, the record kept
 * acquired meanwhile (one the deserializer rejected, whose lock cannot be kept, only while the try
 * fits in its lock, and released then): a record is never rejected without its dead letter. A
 * record whose dead letter it wrote and that comes back as a later delivery (its REJECT never
 * reached the broker: its lock was lost first) is rejected without a second dead letter.
 *
 * <p>The worker works on a delivery only while its owner holds it. A delivery of an offset handed
 * over later supersedes the one the worker has, and a delivery the owner gave up ({@link #abandon},
 * its lock lost) is not processed again: its queued retries (a hold, a dead letter not written yet)
 * are dropped undecided, or its handler would run for a record no longer this consumer's, and a
 * second dead letter be written beside the one of the new delivery. A copy of a delivery the worker
 * already has (its owner forgot it and took it back) is not processed twice: the copy in hand
 * decides, and a copy of a delivery already decided gets that decision again.
 *
 * <p>With a batch size above one ({@link ShareRecordWorker}, whose owner hands records over one at
 * a time), the worker takes the other records due together with the work it takes, until none comes
 * for {@link #BATCH_LINGER_NANOS} or the batch is full, and prepares them as one batch: one claim
 * statement for the lot, as for a poll of the share loop, whose work is already a whole poll (batch
 * size one: taken as it came).
 */
final class ShareWorker<K, V> implements Runnable {
  // The loop's logger: applications and tests select the loop's messages by its name.
  private static final Logger log = LoggerFactory.getLogger(DedupShareLoop.class);

  /**
   * With a batch size above one, how long the worker waits for the next record to be handed over
   * before it processes the batch in hand: the handover of a poll's records takes microseconds per
   * record, so a pause this long ends it.
   */
  static final long BATCH_LINGER_NANOS = TimeUnit.MILLISECONDS.toNanos(1);

  /**
   * Local attempt counts kept for records released to other deliveries, and decisions kept for
   * copies of a delivery handed over again, at most this many each.
   */
  private static final int MAX_COUNTED = 10_000;

  private final RecordProcessor<K, V> processor;
  private final DeadLetterHandler<K, V> deadLetters;
  private final Consumer<Decision> decisions;
  private final int maxAttempts;
  private final int deliveryCountLimit;
  private final Duration retryBackOff;
  private final Duration holdBackOff;
  private final Duration maxHoldBackOff;
  private final String groupId;
  private final int maxBatch;

  private final DelayQueue<Work<K, V>> queue = new DelayQueue<>();
  private final Map<Id, Duration> holds = new LinkedHashMap<>();
  private final Map<Id, Integer> counted = lastCounted();

  /**
   * Guards {@link #pending} and {@link #decided}, which the owner's thread reads in {@link #submit}
   * and {@link #abandon}: a delivery the owner takes back is then either still the worker's, or
   * handed over anew, never lost between the two.
   */
  private final Object deliveries = new Object();

  /** The delivery of each record handed over and not decided yet. */
  private final Map<Id, Pending> pending = new HashMap<>();

  /** The last decision of each record decided lately, for a copy of its delivery handed over. */
  private final Map<Id, Decision> decided = lastCounted();

  /**
   * The delivery of each record dead-lettered lately, for a later delivery of it: its REJECT never
   * reached the broker (its lock was lost before it was sent, or the broker refused it), so the
   * broker delivered it again, and it would be dead-lettered a second time. Worker thread only.
   */
  private final Map<Id, Integer> deadLettered = lastCounted();

  /** A map that keeps the last {@link #MAX_COUNTED} records put in it, the oldest dropped. */
  private static <T> Map<Id, T> lastCounted() {
    return new LinkedHashMap<>() {
      private static final long serialVersionUID = 1L;

      @Override
      protected boolean removeEldestEntry(Map.Entry<Id, T> eldest) {
        return size() > MAX_COUNTED;
      }
    };
  }

  private volatile boolean running = true;
  private volatile @Nullable Error fatal;

  /** The record whose handler or dead letter runs now; null between records. */
  private volatile @Nullable ConsumerRecord<?, ?> inHand;

  /**
   * A delivery handed over and not decided; abandoned once its owner gave it up. {@code
   * lockEndsNanos} tells apart the deliveries of a record the deserializer rejected, which all
   * count 0; 0 for any other record.
   */
  private static final class Pending {
    final int delivery;
    final long lockEndsNanos;
    boolean abandoned;

    Pending(int delivery, long lockEndsNanos) {
      this.delivery = delivery;
      this.lockEndsNanos = lockEndsNanos;
    }

    boolean is(int delivery, long lockEndsNanos) {
      return this.delivery == delivery && this.lockEndsNanos == lockEndsNanos;
    }
  }

  ShareWorker(
      RecordProcessor<K, V> processor,
      DeadLetterHandler<K, V> deadLetters,
      Consumer<Decision> decisions,
      int maxAttempts,
      int deliveryCountLimit,
      Duration retryBackOff,
      Duration holdBackOff,
      Duration maxHoldBackOff,
      String groupId,
      int maxBatch) {
    this.processor = processor;
    this.deadLetters = deadLetters;
    this.decisions = decisions;
    this.maxAttempts = maxAttempts;
    this.deliveryCountLimit = deliveryCountLimit;
    this.retryBackOff = retryBackOff;
    this.holdBackOff = holdBackOff;
    this.maxHoldBackOff = maxHoldBackOff;
    this.groupId = groupId;
    this.maxBatch = maxBatch;
  }

  /**
   * A poll's new records, processed together as soon as the worker gets to them. A record whose
   * delivery the worker already has is not processed twice: the copy it has goes on, or, if it
   * decided that delivery already, its decision is given again (the owner had forgotten the
   * delivery, its renewal late, and took it back).
   */
  void submit(List<ConsumerRecord<K, V>> records) {
    List<ConsumerRecord<K, V>> fresh = new ArrayList<>(records.size());
    List<Decision> again = new ArrayList<>();
    synchronized (deliveries) {
      for (ConsumerRecord<K, V> record : records) {
        Id id = Id.of(record);
        int delivery = ShareInFlight.delivery(record);
        Pending taken = pending.get(id);
        if (delivery > 0 && taken != null && taken.delivery == delivery) {
          taken.abandoned = false; // the owner holds it again
          continue;
        }
        Decision decision = decided.get(id);
        if (delivery > 0 && taken == null && decision != null && decision.delivery() == delivery) {
          again.add(decision);
          continue;
        }
        pending.put(id, new Pending(delivery, 0)); // an earlier delivery taken is superseded
        fresh.add(record);
      }
    }
    again.forEach(decisions);
    if (!fresh.isEmpty()) {
      queue.add(new Work<>(fresh, null, System.nanoTime()));
    }
  }

  /**
   * A record the deserializer rejected, whose lock, which its owner cannot renew (see {@link
   * ShareInFlight#addUndeserializable}), runs out at {@code lockEndsNanos}: its raw bytes are
   * dead-lettered, then REJECT is decided. A dead letter that cannot be written is tried again
   * after the hold back-off while that try, and a RELEASE after it, still fit in the lock; then
   * RELEASE, for another delivery; if its lock ran out before it was handed over, RELEASE without a
   * try. Released at the first failure, the record spent a delivery on each try, and a dead-letter
   * topic away for a few seconds had the broker archive it without its dead letter; left to its
   * lock, its consumer (which cannot poll while it holds the record) waited for the lock to run
   * out.
   */
  void submitUndeserializable(
      ConsumerRecord<byte[], byte[]> raw, Exception reason, long lockEndsNanos) {
    synchronized (deliveries) {
      // A later delivery (a new lock end) supersedes the one whose dead letter may still be tried:
      // that one's decision is dropped, and this one gets a try of its own.
      pending.put(Id.of(raw), new Pending(ShareInFlight.delivery(raw), lockEndsNanos));
    }
    DeadLetter deadLetter =
        new DeadLetter(
            raw,
            () ->
                KafkaDeadLetterPublisher.deadLetterUndeserializableFor(
                    deadLetters, groupId, raw, reason),
            false,
            lockEndsNanos,
            System.nanoTime() - lockEndsNanos >= 0);
    queue.add(new Work<>(List.of(), deadLetter, System.nanoTime()));
  }

  /**
   * The owner gave the record's delivery up (its lock was lost): the worker does not process it
   * again unless it is handed over again. The record in hand, if it is that one, is finished; its
   * decision is the owner's to drop.
   */
  void abandon(ConsumerRecord<?, ?> record) {
    synchronized (deliveries) {
      Pending taken = pending.get(Id.of(record));
      if (taken != null && taken.delivery == ShareInFlight.delivery(record)) {
        taken.abandoned = true;
      }
    }
  }

  /**
   * Whether the worker is to process this delivery now: false once its owner gave it up or a later
   * delivery of the offset was handed over, and then it is forgotten, undecided; false too for a
   * later delivery of a record this worker dead-lettered, which is rejected at once.
   */
  private boolean stillHeld(ConsumerRecord<?, ?> record) {
    return stillHeld(record, 0);
  }

  /**
   * {@link #stillHeld(ConsumerRecord)} for the delivery whose lock ends at {@code lockEndsNanos}.
   */
  private boolean stillHeld(ConsumerRecord<?, ?> record, long lockEndsNanos) {
    Id id = Id.of(record);
    int delivery = ShareInFlight.delivery(record);
    boolean held = false;
    synchronized (deliveries) {
      Pending taken = pending.get(id);
      if (taken == null) {
        // Decided already: a later delivery, handed over and decided while this one's retry
        // waited (which would write a second dead letter, or run the handler again).
        held = !decided.containsKey(id);
      } else if (taken.is(delivery, lockEndsNanos) && !taken.abandoned) {
        held = true;
      } else if (taken.is(delivery, lockEndsNanos)) {
        pending.remove(id);
        holds.remove(id);
      }
    }
    if (held) {
      Integer written = deadLettered.get(id);
      // A record the deserializer rejected has no delivery count (kafka-clients reports none with
      // it): 0 on every delivery. Its dead letter written, it is handed over again only as a later
      // delivery, whose REJECT came too late, and it was dead-lettered once more on each.
      if (written != null && delivery == 0) {
        log.warn(
            "{} came back after this consumer dead-lettered it: its REJECT did not reach the"
                + " broker in time (its lock was lost); rejecting it without another dead letter",
            describe(record));
        done(record, AcknowledgeType.REJECT, 0, lockEndsNanos);
        return false;
      }
      if (written != null && written < delivery) {
        log.warn(
            "{} came back (delivery {}) after this consumer dead-lettered it on delivery {}: its"
                + " REJECT did not reach the broker in time (its lock was lost); rejecting it"
                + " without another dead letter",
            describe(record),
            delivery,
            written);
        done(record, AcknowledgeType.REJECT, 0, lockEndsNanos);
        return false;
      }
      return true;
    }
    log.info(
        "Not processing {} (delivery {}) again: its lock was lost, so it is no longer this"
            + " consumer's",
        describe(record),
        delivery);
    return false;
  }

  /** Stops after the record in hand; the records not processed get no decision. */
  void stop() {
    running = false;
  }

  /**
   * Says why the owner's stop took the whole close timeout, and what becomes of the record in hand,
   * for an owner stopping without this worker, which did not finish within {@code closeTimeout}:
   * without a word, the user saw a slow stop and a record delivered again, and could not tell why.
   * One message for every owner ({@link DedupShareLoop}, {@link ShareRecordWorker}'s).
   */
  void warnStoppingWithoutIt(Duration closeTimeout) {
    ConsumerRecord<?, ?> record = inHand;
    if (record != null) {
      log.warn(
          "{} was still in hand (its handler or its dead letter running) when the close timeout"
              + " of {} ran out; stopping without it: the record is given back unacknowledged and"
              + " the broker delivers it again (if its handler still records SUCCESS, that"
              + " delivery is a duplicate)",
          describe(record),
          closeTimeout);
    } else {
      log.warn(
          "The worker of share group {} did not finish within the close timeout of {} (recording"
              + " the outcomes of its records); stopping without it: the records not acknowledged"
              + " yet are given back and the broker delivers them again",
          groupId,
          closeTimeout);
    }
  }

  /** The Error a handler threw, which ends the loop; null if none. */
  @Nullable Error fatal() {
    return fatal;
  }

  @Override
  public void run() {
    LoopAttemptLimit.setOnThisThread(maxAttempts);
    try {
      work();
    } finally {
      LoopAttemptLimit.clearOnThisThread();
    }
  }

  private void work() {
    while (running) {
      // The wait for work inside the catch of Errors too: an OutOfMemoryError as the wait allocates
      // ended this thread with no fatal Error set, and the loop renewed its records' locks for good
      // and never fetched again.
      try {
        Work<K, V> work;
        try {
          work = queue.poll(100, TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
          // Nobody interrupts this thread to stop it (stop() does): the flag is a handler's.
          continue;
        }
        if (work == null) {
          continue;
        }
        DeadLetter deadLetter = work.deadLetter();
        if (deadLetter != null) {
          if (stillHeld(deadLetter.record(), deadLetter.lockEndsNanos())) {
            deadLetterThenReject(deadLetter);
          }
        } else {
          List<ConsumerRecord<K, V>> batch = held(withOtherDueWork(work.records()));
          if (!batch.isEmpty()) {
            process(batch);
          }
        }
      } catch (Error e) {
        fatal = e;
        running = false;
      }
    }
  }

  /**
   * {@code records} and the records of the other work due, up to {@link #maxBatch} records, until
   * none comes for {@link #BATCH_LINGER_NANOS}; dead letters due meanwhile are written first (they
   * call no handler).
   */
  private List<ConsumerRecord<K, V>> withOtherDueWork(List<ConsumerRecord<K, V>> records) {
    if (maxBatch <= 1 || records.size() >= maxBatch) {
      return records;
    }
    List<ConsumerRecord<K, V>> batch = new ArrayList<>(records);
    while (batch.size() < maxBatch && running) {
      Work<K, V> next = queue.poll(); // the next work only if it is due
      if (next == null) {
        // The owner hands a poll's records over one by one, within microseconds: waiting for the
        // handover to pause takes the rest of the poll into this batch, not into a second one.
        try {
          next = queue.poll(BATCH_LINGER_NANOS, TimeUnit.NANOSECONDS);
        } catch (InterruptedException e) {
          break; // the flag is a handler's (see run()); the batch goes as it is
        }
        if (next == null) {
          break;
        }
      }
      DeadLetter deadLetter = next.deadLetter();
      if (deadLetter != null) {
        if (stillHeld(deadLetter.record(), deadLetter.lockEndsNanos())) {
          deadLetterThenReject(deadLetter);
        }
      } else {
        batch.addAll(next.records());
      }
    }
    return batch;
  }

  /** The records whose delivery the owner still holds. */
  private List<ConsumerRecord<K, V>> held(List<ConsumerRecord<K, V>> records) {
    List<ConsumerRecord<K, V>> held = new ArrayList<>(records.size());
    for (ConsumerRecord<K, V> record : records) {
      if (stillHeld(record)) {
        held.add(record);
      }
    }
    return held;
  }

  private void process(List<ConsumerRecord<K, V>> records) {
    List<ConsumerRecord<K, V>> processed = new ArrayList<>();
    List<ConsumerRecord<K, V>> later = new ArrayList<>();
    Error error = null;
    try {
      // Within the try: an Error thrown while preparing still settles what was prepared (claims
      // made for the batch are given back, not left held under a lease this process renews).
      try {
        processor.prepare(records);
      } catch (Exception e) { // a checked one too: see processOne
        log.warn(
            "Could not prepare {} records together; processing them one by one", records.size());
      } catch (Error e) {
        // Met before any handler ran (an OutOfMemoryError as the batch claim's answer was read):
        // the records are kept acquired and tried again, as when the store does not answer. Ending
        // the worker on it left the poll undecided; the loop's consumer closed and gave the records
        // back, a delivery counted each, so a loop restarted on the Error again and again had the
        // broker archive a healthy record unapplied, its handler never run. What was prepared is
        // settled below (claims made are given back).
        ErrorsBesideHandlers.clear();
        later.addAll(records);
        // A second OutOfMemoryError as the line is written (Logback passes an appender's Error
        // on) ended the worker all the same: the loop stopped, its consumer's close gave the
        // records back, a delivery counted each, until the broker archived them unapplied. The
        // records are kept first, and the line is lost instead.
        LostLines.error(
            log,
            "Could not claim {} records together, first {}; no handler ran: keeping them"
                + " acquired and trying again",
            records.size(),
            records.get(0),
            groupId,
            e);
        return;
      }
      for (ConsumerRecord<K, V> record : records) {
        if (!running) {
          break;
        }
        if (!stillHeld(record)) {
          continue; // given up while the records before it ran; its claim is given back
        }
        try {
          processOne(record, processed, later);
        } catch (Error e) {
          // This record's only (its handler's); the worker stops once the batch is processed.
          // Stopping here left the batch's other records undecided: their
          // owner closes and the broker counts their delivery, so a loop that ended on an Error
          // again and again had the broker archive a healthy record of the batch unapplied.
          error = FirstFailure.of(error, e);
        }
      }
    } catch (Error e) {
      // As the batch was prepared, or a record looked up: what was prepared is settled all the
      // same.
      error = FirstFailure.of(error, e);
    } finally {
      Set<ConsumerRecord<K, V>> unrecorded = Collections.newSetFromMap(new IdentityHashMap<>());
      try {
        unrecorded.addAll(processor.settle());
      } catch (Exception e) { // a checked one too: see processOne
        // A processor's exception (an application's decorator of the handler): one whose
        // printing throws ended the worker here, the poll never decided, its locks renewed for
        // good and nothing fetched again.
        log.error(
            "Could not settle the poll's records; processing them again", FailureTexts.loggable(e));
        unrecorded.addAll(processed);
      } catch (Error e) {
        // Whether their SUCCESS marks were written is not known: processed again, as above, a
        // duplicate then accepted. Thrown from here, this Error took the place of a handler's
        // (the log named the wrong one) and left the processed records with no decision at all.
        unrecorded.addAll(processed);
        error = FirstFailure.of(error, e);
      }
      for (ConsumerRecord<K, V> record : processed) {
        if (unrecorded.contains(record)) {
          later.add(record);
        } else {
          done(record, AcknowledgeType.ACCEPT, 0);
        }
      }
      if (running && !later.isEmpty()) {
        holdAll(later);
      }
    }
    if (error != null) {
      throw error;
    }
  }

  /**
   * Processes one record of a batch and decides what it can at once: an ACCEPT for a duplicate, the
   * handler's failure; a record whose handler ran goes to {@code processed}, to be accepted once
   * settled, one to retry to {@code later}.
   *
   * @throws Error the handler's, once its failure is handled as any other's (one thrown as the
   *     record's dead letter is written is a failed try of the dead letter: tried again, the record
   *     kept); not one met as the record's key was claimed, which has the record claimed again
   */
  private void processOne(
      ConsumerRecord<K, V> record,
      List<ConsumerRecord<K, V>> processed,
      List<ConsumerRecord<K, V>> later) {
    Outcome outcome;
    try {
      outcome = processAndClearInterrupt(record);
    } catch (Exception e) {
      // A checked exception too, which the processor's signature does not declare but an
      // application's processor throws all the same (written in Kotlin, or with Lombok's
      // @SneakyThrows): caught as neither a runtime exception nor an Error, it ended this thread
      // with no fatal Error, and the loop renewed the poll's locks for good, deciding nothing.
      switch (Disposition.of(e)) {
        case RETRY_LATER -> later.add(record);
        case DEAD_LETTER -> {
          log.error(
              "{} cannot be handled (not retryable); dead-lettering it",
              describe(record),
              FailureTexts.loggable(e));
          deadLetterThenReject(record, e);
        }
        case HANDLER_FAILED -> handlerFailed(record, e);
      }
      return;
    } catch (Error e) {
      if (ErrorsBesideHandlers.wasBesideHandler(e)) {
        // Met as the key was claimed, before the handler ran (an OutOfMemoryError as the claim's
        // answer was read): counted as the handler's failure, it spent the record's attempts and
        // dead-lettered it without its retry ever running. No attempt: the record is kept
        // acquired and claimed again after the hold back-off, as when the store does not answer.
        // Ending the worker on it left the record undecided; the loop's consumer closed and gave
        // it back, a delivery counted, so a loop restarted on the Error again and again had the
        // broker archive a healthy record unapplied, its handler never run.
        later.add(record);
        LostLines.error(
            log,
            "Could not claim {}; its handler did not run: keeping it acquired and trying again",
            record,
            groupId,
            null,
            e);
        return;
      }
      try {
        handlerFailed(record, new HandlerErrorException(e));
      } catch (Error settling) {
        if (settling != e) {
          e.addSuppressed(settling);
        }
      }
      throw e;
    }
    if (outcome == Outcome.DUPLICATE) {
      done(record, AcknowledgeType.ACCEPT, 0);
    } else {
      processed.add(record);
    }
  }

  /**
   * Processes one record, then clears the interrupt flag its handler may have left (restored after
   * an {@code InterruptedException} it caught, or set by consumer-dedup for a handler that threw
   * one): on this thread the flag is no stop request, which {@link #stop()} makes. Left set, it
   * made the worker's next wait for work throw and the worker end, its records then renewed for
   * good and never handled; and the next records of the poll would meet it in their own calls.
   */
  private Outcome processAndClearInterrupt(ConsumerRecord<K, V> record) {
    inHand = record;
    try {
      return processor.process(record);
    } finally {
      inHand = null;
      if (Thread.interrupted()) {
        log.warn(
            "The handler of {} left its thread interrupted; cleared, the next records are handled"
                + " as usual",
            describe(record));
      }
    }
  }

  /** Processes the records again after their hold back-off, kept acquired meanwhile. */
  private void holdAll(List<ConsumerRecord<K, V>> records) {
    Duration wait = Duration.ZERO;
    for (ConsumerRecord<K, V> record : records) {
      Duration next = nextHold(Id.of(record));
      wait = next.compareTo(wait) > 0 ? next : wait;
    }
    log.info(
        "{} record(s) cannot be handled yet (another consumer holds the key, or the dedup store"
            + " does not answer), first {}; keeping them acquired and trying again in {}",
        records.size(),
        describe(records.get(0)),
        wait);
    queue.add(new Work<>(records, null, System.nanoTime() + wait.toNanos()));
  }

  /** The record's next hold back-off: the first, or the last one doubled; kept for the next. */
  private Duration nextHold(Id id) {
    Duration previous = holds.get(id);
    Duration next =
        previous == null ? holdBackOff : Durations.doubling(previous, maxHoldBackOff, 2);
    holds.put(id, next);
    return next;
  }

  private void handlerFailed(ConsumerRecord<K, V> record, Exception e) {
    Id id = Id.of(record);
    int local = counted.merge(id, 1, Integer::sum);
    OptionalInt stored = storedAttempts(record);
    int attempts = Math.max(local, stored.orElse(0));
    int delivery = record.deliveryCount().map(Short::intValue).orElse(1);
    if (attempts >= maxAttempts || delivery >= deliveryCountLimit) {
      log.error(
          "Handler failed for {} on attempt {} of {} (delivery {} of at most {}); dead-lettering"
              + " it",
          describe(record),
          attempts,
          maxAttempts,
          delivery,
          deliveryCountLimit,
          FailureTexts.loggable(e));
      deadLetterThenReject(record, e);
      return;
    }
    log.warn(
        "Handler failed for {} on attempt {} of {}; releasing it for another delivery in {}: {}",
        describe(record),
        attempts,
        maxAttempts,
        retryBackOff,
        // An exception whose toString() throws must not end the worker on its record.
        FailureTexts.describe(e));
    log.debug(
        "Stack trace of the failed attempt of {}", describe(record), FailureTexts.loggable(e));
    done(record, AcknowledgeType.RELEASE, retryBackOff.toNanos());
  }

  private OptionalInt storedAttempts(ConsumerRecord<K, V> record) {
    try {
      return processor.attempts(record);
    } catch (Exception e) { // a checked one too: see processOne
      log.warn(
          "Could not read how often {} was attempted; counting this consumer's attempts only",
          describe(record),
          FailureTexts.loggable(e)); // as settle's above
      return OptionalInt.empty();
    }
  }

  private void deadLetterThenReject(ConsumerRecord<K, V> record, Exception reason) {
    deadLetterThenReject(
        new DeadLetter(
            record,
            () -> KafkaDeadLetterPublisher.deadLetterFor(deadLetters, groupId, record, reason),
            true,
            0,
            false));
  }

  /**
   * Writes the dead letter, then decides REJECT; if it cannot be written, tries again later, the
   * record kept acquired, or, for a record whose lock cannot be kept, decides RELEASE once a try
   * and a RELEASE after it no longer fit in its lock.
   *
   * <p>An {@code Error} the dead-letter handler throws (an {@code OutOfMemoryError} as a large
   * record is copied, a serializer's {@code StackOverflowError}) is a failed try like any other.
   * Ending the worker on it left the record undecided: {@code DedupShareLoop} ended, its close gave
   * the record back and the broker counted the delivery, so a loop restarted on it again and again
   * had the broker archive it without its dead letter; a Spring container's new worker took the
   * record at once and met the Error again, hundreds of times a second.
   */
  private void deadLetterThenReject(DeadLetter deadLetter) {
    ConsumerRecord<?, ?> record = deadLetter.record();
    if (deadLetter.lockRanOutBeforeHandover()) {
      // In kafka-clients' buffer, behind records whose handling outlasted it: the broker has
      // delivered it again, maybe to another consumer, which writes its own dead letter; written
      // here too, it was written twice. (One whose lock runs out while it waits for this worker is
      // still written: skipped each time, behind a handler that outlasts the lock again and again,
      // it would spend its deliveries until the broker archived it without one.)
      // Decided first: an Error as the line is written must not leave it undecided.
      done(record, AcknowledgeType.RELEASE, 0, deadLetter.lockEndsNanos());
      LostLines.warn(
          log,
          "{} is not dead-lettered here: its acquisition lock, which cannot be renewed, ran out"
              + " before the poll returned it (in kafka-clients' buffer, behind records whose"
              + " handling outlasted the lock); the broker delivers it again, and that delivery"
              + " is dead-lettered",
          record,
          groupId);
      return;
    }
    inHand = record;
    try {
      deadLetter.write().run();
    } catch (Exception | Error e) { // the application's DeadLetterHandler's, a checked one too
      Duration wait = nextHold(Id.of(record));
      if (deadLetter.keptAcquired()) {
        queue.add(new Work<>(List.of(), deadLetter, System.nanoTime() + wait.toNanos()));
        // What the application's DeadLetterHandler threw: its printing must not end the worker
        // once the record is kept for the next try.
        LostLines.error(
            log,
            "Could not dead-letter {}; keeping it acquired and trying again in {}",
            record,
            groupId,
            wait,
            e);
      } else if (System.nanoTime() + 2 * wait.toNanos() - deadLetter.lockEndsNanos() < 0) {
        // The try after the wait, and as long again for it and the RELEASE after it.
        queue.add(new Work<>(List.of(), deadLetter, System.nanoTime() + wait.toNanos()));
        LostLines.error(
            log,
            "Could not dead-letter {}; trying again in {}, within its acquisition lock",
            record,
            groupId,
            wait,
            e);
      } else {
        done(record, AcknowledgeType.RELEASE, 0, deadLetter.lockEndsNanos());
        LostLines.error(
            log, "Could not dead-letter {}; it is delivered again", record, groupId, null, e);
      }
      return;
    } finally {
      inHand = null;
    }
    deadLettered.put(Id.of(record), ShareInFlight.delivery(record));
    done(record, AcknowledgeType.REJECT, 0, deadLetter.lockEndsNanos());
  }

  private void done(ConsumerRecord<?, ?> record, AcknowledgeType type, long delayNanos) {
    done(record, type, delayNanos, 0);
  }

  /**
   * {@code lockEndsNanos}: that of the delivery decided, for a record the deserializer rejected.
   * Matched by its count alone (0 on each of its deliveries), a slow dead letter's RELEASE was
   * taken for the later delivery handed over meanwhile, which was then released without a try of
   * its own, and a dead-letter topic slow to fail had the broker archive the record without its
   * dead letter after half its deliveries.
   */
  private void done(
      ConsumerRecord<?, ?> record, AcknowledgeType type, long delayNanos, long lockEndsNanos) {
    Id id = Id.of(record);
    int delivery = ShareInFlight.delivery(record);
    Decision decision =
        new Decision(id, delivery, type, System.nanoTime() + delayNanos, lockEndsNanos);
    boolean superseded;
    synchronized (deliveries) {
      Pending taken = pending.get(id);
      // A later delivery handed over meanwhile: what is kept for the offset is that one's.
      superseded = taken != null && !taken.is(delivery, lockEndsNanos);
      if (!superseded) {
        pending.remove(id);
        decided.put(id, decision);
      }
    }
    if (!superseded) {
      holds.remove(id);
      if (type != AcknowledgeType.RELEASE) {
        counted.remove(id);
      }
    }
    decisions.accept(decision); // the owner drops one for a delivery it no longer holds
  }

  private String describe(ConsumerRecord<?, ?> record) {
    return RecordSources.describe(record, groupId);
  }

  /**
   * The dead letter of {@code record}, written by {@code write}; {@code keptAcquired}: if it cannot
   * be written, the record is kept acquired and it is tried again; else it is tried again only
   * within its lock, which runs out at {@code lockEndsNanos}, and then released; {@code
   * lockRanOutBeforeHandover}: not written at all, but released.
   */
  private record DeadLetter(
      ConsumerRecord<?, ?> record,
      Runnable write,
      boolean keptAcquired,
      long lockEndsNanos,
      boolean lockRanOutBeforeHandover) {}

  /** Records to process when due, or (with no records) one dead letter to write. */
  private record Work<K, V>(
      List<ConsumerRecord<K, V>> records, @Nullable DeadLetter deadLetter, long dueNanos)
      implements Delayed {
    @Override
    public long getDelay(TimeUnit unit) {
      return unit.convert(dueNanos - System.nanoTime(), TimeUnit.NANOSECONDS);
    }

    @Override
    public int compareTo(Delayed other) {
      return Long.compare(getDelay(TimeUnit.NANOSECONDS), other.getDelay(TimeUnit.NANOSECONDS));
    }
  }
}
