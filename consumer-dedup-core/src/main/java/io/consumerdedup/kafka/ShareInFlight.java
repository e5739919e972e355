package io.consumerdedup.kafka;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.ShareConsumer;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The records {@link DedupShareLoop}'s consumer has acquired and not yet acknowledged for good, and
 * what is decided for each. Used by the loop's thread only (a share consumer is not thread-safe).
 *
 * <p>In explicit acknowledgement mode every record a poll returned must be acknowledged before the
 * next poll. A record whose handler still runs, or that waits for another consumer's claim, is
 * acknowledged with {@code RENEW}: the broker extends its acquisition lock without counting a
 * delivery, and the consumer hands the record back in a later poll (kafka-clients 4.2), after which
 * it is acknowledgeable again. A record is therefore either held (acknowledgeable) or out for
 * renewal.
 */
final class ShareInFlight<K, V> {
  // The loop's logger: applications and tests select the loop's messages by its name.
  private static final Logger log = LoggerFactory.getLogger(DedupShareLoop.class);

  /** A record by its coordinates: a renewed record comes back as the same offset. */
  record Id(String topic, int partition, long offset) {
    static Id of(ConsumerRecord<?, ?> record) {
      return new Id(record.topic(), record.partition(), record.offset());
    }

    @Override
    public String toString() {
      return topic + "-" + partition + "@" + offset;
    }
  }

  /**
   * What the worker decided for a record: the acknowledgement to send, not before {@code
   * notBeforeNanos} (a failed record is released only after the retry back-off). {@code delivery}
   * is the delivery it was decided for: a lost lock has the broker deliver the same offset again,
   * and a decision made from the earlier delivery's count (a RELEASE on what is now the last
   * delivery archives the record without its dead letter) must not be sent for the later one.
   * {@code lockEndsNanos} tells apart the deliveries of a record the deserializer rejected, which
   * all count 0 (kafka-clients reports no count with it): when that delivery's lock runs out; 0 for
   * any other record.
   */
  record Decision(
      Id id, int delivery, AcknowledgeType type, long notBeforeNanos, long lockEndsNanos) {
    Decision(Id id, int delivery, AcknowledgeType type, long notBeforeNanos) {
      this(id, delivery, type, notBeforeNanos, 0);
    }
  }

  /** The record's delivery count; 0 if the consumer did not report one. */
  static int delivery(ConsumerRecord<?, ?> record) {
    return record.deliveryCount().map(Short::intValue).orElse(0);
  }

  private static final class Entry<K, V> {
    /** The record; its raw bytes for one the deserializer rejected. */
    ConsumerRecord<?, ?> record;

    /** The record as polled; null for one the deserializer rejected, acknowledged by offset. */
    @Nullable ConsumerRecord<K, V> polled;

    boolean held = true;
    long renewalSentNanos;
    @Nullable Decision decision;

    Entry(ConsumerRecord<?, ?> record, @Nullable ConsumerRecord<K, V> polled) {
      this.record = record;
      this.polled = polled;
    }

    /** Whether its lock can be renewed; see {@link ShareInFlight#addUndeserializable}. */
    boolean renewable() {
      return polled != null;
    }
  }

  /** How many dead-lettered records {@link #deadLetteredBefore} remembers, the latest. */
  private static final int REMEMBERED_DEAD_LETTERS = 1024;

  private final ShareConsumer<K, V> consumer;
  private final Consumer<ConsumerRecord<?, ?>> lost;
  private final Map<Id, Entry<K, V>> entries = new LinkedHashMap<>();

  /**
   * Records the deserializer rejected that were rejected here once their dead letter was written.
   */
  private final Map<Id, Boolean> deadLettered =
      new LinkedHashMap<>() {
        @Override
        protected boolean removeEldestEntry(Map.Entry<Id, Boolean> eldest) {
          return size() > REMEMBERED_DEAD_LETTERS;
        }
      };

  /** Whether the consumer holds acknowledgements made here that no commit or poll has sent yet. */
  private boolean unsent;

  /**
   * @param lost told of each record forgotten because the consumer no longer holds it (a RENEW
   *     refused, a renewal that never came back): whoever processes the records must stop acting on
   *     it, or a retry queued for it (a hold, a dead letter) would run for a record the broker
   *     delivers again, perhaps to another consumer, which writes its own dead letter.
   */
  ShareInFlight(ShareConsumer<K, V> consumer, Consumer<ConsumerRecord<?, ?>> lost) {
    this.consumer = consumer;
    this.lost = lost;
  }

  boolean isEmpty() {
    return entries.isEmpty();
  }

  /**
   * Takes in what a poll returned: records out for renewal are held again; the others are new and
   * returned, in the poll's order, for the worker. A renewal counts no delivery, so a known offset
   * with another delivery count is no renewed record but a new delivery after its lock was lost:
   * the earlier one is forgotten (never acknowledged: an acknowledgement names the offset, so it
   * would settle the new delivery) and the new one goes to the worker, whose claim finds what the
   * earlier delivery's run left.
   */
  List<ConsumerRecord<K, V>> add(ConsumerRecords<K, V> polled) {
    List<ConsumerRecord<K, V>> fresh = new ArrayList<>();
    for (ConsumerRecord<K, V> record : polled) {
      Id id = Id.of(record);
      Entry<K, V> entry = entries.get(id);
      if (entry != null && delivery(entry.record) != delivery(record)) {
        log.warn(
            "{} came back as delivery {}, not as the renewed delivery {}: its lock was lost;"
                + " handling the new delivery, and sending nothing decided for the earlier one",
            id,
            delivery(record),
            delivery(entry.record));
        entries.remove(id);
        entry = null;
      }
      if (entry == null) {
        entries.put(id, new Entry<>(record, record));
        fresh.add(record);
      } else {
        entry.record = record;
        entry.polled = record;
        entry.held = true;
      }
    }
    return fresh;
  }

  /**
   * Takes in a record the poll met and the deserializer rejected (its raw bytes), which waits for
   * its dead letter like any other decision. Its lock cannot be renewed: kafka-clients (4.2) takes
   * one acknowledgement of such a record, by offset, and after a RENEW it neither hands the record
   * back nor takes its REJECT. Meanwhile nothing may be polled or committed: the consumer would
   * send the RELEASE it holds for the record by default, and the REJECT decided later would be
   * refused. So no poll comes while it is in flight ({@link #holdsUndeserializable}). It came from
   * a poll with no record held: the first poll of the next records, or one that was to take renewed
   * records back and found none on their way (their renewal refused), whose records out for renewal
   * are stale and dropped once it is acknowledged.
   */
  void addUndeserializable(ConsumerRecord<byte[], byte[]> raw) {
    entries.put(Id.of(raw), new Entry<K, V>(raw, null));
  }

  /**
   * Whether this consumer rejected the record the deserializer rejected once its dead letter was
   * written, and the broker delivers it again: that REJECT came too late. kafka-clients (4.2) keeps
   * the records a fetch acquired behind a rejected one in its buffer, unseen and unrenewable, until
   * every record returned before it is acknowledged; behind a handler that outlasts the lock, the
   * rejected record's lock runs out there, the broker refuses its REJECT and delivers it again.
   */
  boolean deadLetteredBefore(ConsumerRecord<byte[], byte[]> raw) {
    return deadLettered.containsKey(Id.of(raw));
  }

  /**
   * Whether a record the deserializer rejected is in flight: until it is acknowledged, nothing may
   * be polled (see {@link #addUndeserializable}).
   */
  boolean holdsUndeserializable() {
    for (Entry<K, V> entry : entries.values()) {
      if (!entry.renewable()) {
        return true;
      }
    }
    return false;
  }

  /**
   * Records the worker's decision; one for a record no longer in flight, or for an earlier delivery
   * of it, is dropped.
   */
  void decide(Decision decision) {
    Entry<K, V> entry = entries.get(decision.id());
    if (entry != null && delivery(entry.record) == decision.delivery()) {
      entry.decision = decision;
    } else if (entry != null) {
      log.debug(
          "Dropping the {} decided for delivery {} of {}: delivery {} is in flight now",
          decision.type(),
          decision.delivery(),
          decision.id(),
          delivery(entry.record));
    }
  }

  /**
   * Sends the decided acknowledgements that are due, of held records ({@code all}: every decided
   * one, due or not), and forgets those records.
   */
  void acknowledgeDecided(long nowNanos, boolean all) {
    for (Iterator<Entry<K, V>> it = entries.values().iterator(); it.hasNext(); ) {
      Entry<K, V> entry = it.next();
      Decision decision = entry.decision;
      if (entry.held && decision != null && (all || nowNanos - decision.notBeforeNanos() >= 0)) {
        it.remove();
        if (acknowledge(entry, decision.type())
            && !entry.renewable()
            && decision.type() == AcknowledgeType.REJECT) {
          deadLettered.put(Id.of(entry.record), Boolean.TRUE);
        }
      }
    }
  }

  /** The earliest time a decided, held record is due; {@code fallback} if none. */
  long nextDue(long fallback) {
    long next = fallback;
    for (Entry<K, V> entry : entries.values()) {
      if (entry.held && entry.decision != null && entry.decision.notBeforeNanos() - next < 0) {
        next = entry.decision.notBeforeNanos();
      }
    }
    return next;
  }

  /** Whether a renewal is on the way: the next poll returns those records, and no new ones. */
  boolean awaitingRenewals() {
    for (Entry<K, V> entry : entries.values()) {
      if (!entry.held) {
        return true;
      }
    }
    return false;
  }

  /** Whether a record with a decision is out for renewal: it can be acknowledged once back. */
  boolean decidedAwaitingRenewal() {
    for (Entry<K, V> entry : entries.values()) {
      if (!entry.held && entry.decision != null) {
        return true;
      }
    }
    return false;
  }

  /** Acknowledges every held record with RENEW, so that a poll may follow; how many. */
  int renewHeld(long nowNanos) {
    int renewed = 0;
    for (Iterator<Entry<K, V>> it = entries.values().iterator(); it.hasNext(); ) {
      Entry<K, V> entry = it.next();
      if (entry.held && entry.renewable()) {
        if (acknowledge(entry, AcknowledgeType.RENEW)) {
          entry.held = false;
          entry.renewalSentNanos = nowNanos;
          renewed++;
        } else {
          it.remove();
          lost.accept(entry.record);
        }
      }
    }
    return renewed;
  }

  /**
   * Acknowledges one record; false if the consumer no longer holds it (its share session was reset,
   * say), in which case the broker delivers it again and the dedup table answers that.
   */
  private boolean acknowledge(Entry<K, V> entry, AcknowledgeType type) {
    ConsumerRecord<?, ?> record = entry.record;
    try {
      if (entry.polled != null) {
        consumer.acknowledge(entry.polled, type);
      } else {
        consumer.acknowledge(record.topic(), record.partition(), record.offset(), type);
      }
      unsent = true;
      return true;
    } catch (IllegalStateException e) {
      log.warn(
          "Could not acknowledge {} ({}): the consumer no longer holds it; the broker delivers it"
              + " again",
          Id.of(record),
          type,
          e);
      return false;
    }
  }

  /**
   * Forgets the records whose renewal has not come back within {@code timeoutNanos}: the broker
   * refused it (their lock had run out, or it does not renew), so they are no longer this
   * consumer's; tells {@code lost} of each, and returns them.
   */
  List<ConsumerRecord<?, ?>> dropUnreturned(long nowNanos, long timeoutNanos) {
    List<ConsumerRecord<?, ?>> dropped = new ArrayList<>();
    for (Iterator<Entry<K, V>> it = entries.values().iterator(); it.hasNext(); ) {
      Entry<K, V> entry = it.next();
      if (!entry.held && nowNanos - entry.renewalSentNanos > timeoutNanos) {
        dropped.add(entry.record);
        it.remove();
        lost.accept(entry.record);
      }
    }
    return dropped;
  }

  /**
   * Whether acknowledgements were made since {@link #acknowledgementsSent}: a poll would carry
   * them, and a poll that throws (a record the deserializer rejects) loses those it carries.
   */
  boolean hasUnsentAcknowledgements() {
    return unsent;
  }

  /** The acknowledgements made so far went with a commit or a poll. */
  void acknowledgementsSent() {
    unsent = false;
  }

  /** How many records are in flight. */
  int size() {
    return entries.size();
  }
}
