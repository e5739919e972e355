package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.core.internal.FailureTexts;
import io.consumerdedup.kafka.internal.ShareFetches;
import io.consumerdedup.kafka.internal.UndeserializableRecords;
import io.consumerdedup.spring.autoconfigure.ShareDeserializationFailures.RejectedByPoll;
import io.consumerdedup.spring.internal.Coordinates;
import java.lang.reflect.Field;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Consumer;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.ShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.RecordDeserializationException;
import org.apache.kafka.common.errors.WakeupException;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.kafka.core.ShareConsumerFactory;
import org.springframework.kafka.listener.AbstractShareKafkaMessageListenerContainer;
import org.springframework.util.ReflectionUtils;

/**
 * Wraps the consumers of a share container whose listener consumer-dedup protects, for two things
 * spring-kafka 4.1 does not do on its own:
 *
 * <ul>
 *   <li>Renewals apart. The consumers send the renewals ({@code RENEW}) that consumer-dedup asks
 *       for on their own, as {@code DedupShareLoop} does, before the container's next poll.
 *       spring-kafka applies a renewal on the consumer's thread and polls: kafka-clients 4.2 sends
 *       it with a fetch, which acquires new records and keeps them in its buffer until every record
 *       in hand is acknowledged. Behind a long handler, or a copy waiting for another consumer's
 *       claim, their locks run out there, unseen, a delivery spent each time, until the broker
 *       archives them unapplied. A {@code commitSync} sends the renewals in a ShareAcknowledge,
 *       which acquires nothing, and the poll after it only takes the renewed records back.
 *   <li>Acknowledgements at close. spring-kafka queues an acknowledgement made on another thread
 *       for its consumer's thread, which sends it between polls, and closes the consumer when the
 *       container stops without sending what is queued. A record consumer-dedup had accepted came
 *       back after a restart, and one it had dead-lettered was dead-lettered a second time. Before
 *       the consumer closes, the listener finishes the record in hand ({@link
 *       DedupShareListener#finish}), and every acknowledgement it made that spring-kafka has not
 *       passed on yet is sent, on the consumer's thread, with the close. spring-kafka closes its
 *       consumer with {@code close()}, which waits up to 30 s for a broker that does not answer:
 *       the close is bounded by the listener's close timeout instead, as {@code DedupShareLoop}'s
 *       is.
 *   <li>Records the deserializer rejects. kafka-clients' poll throws for such a record, and
 *       spring-kafka 4.1's container then rejects it by offset, with no dead letter: the record was
 *       lost. Here the poll returns it instead, as a {@link RejectedByPoll} without key or value,
 *       and the listener's worker writes its dead letter, with the bytes it was sent with, then
 *       decides REJECT, which is sent by offset: kafka-clients 4.2 takes one acknowledgement of
 *       such a record, in that form. Until it is sent nothing is polled or committed: the consumer
 *       would send the RELEASE it holds for the record by default, and the REJECT would then be
 *       refused. Once its lock has run out, the other records' acknowledgements and renewals are
 *       sent again and the renewed records taken back, but nothing new is fetched until the worker
 *       decides it. Written on the worker, a dead letter that hangs does not hold up this thread,
 *       which applies the other records' acknowledgements and renewals meanwhile.
 * </ul>
 */
final class WrappedShareConsumers {
  private static final Logger log = LoggerFactory.getLogger(WrappedShareConsumers.class);

  /** The broker's default lock, until the consumer reports the group's. */
  private static final long DEFAULT_LOCK_MS = 30_000;

  /** How long a poll waits, polling nothing, while a rejected record waits for its dead letter. */
  private static final Duration REJECTED_PAUSE = Duration.ofMillis(10);

  /** spring-kafka 4.1 has no setter for a container's consumer factory. */
  private static final @Nullable Field FACTORY =
      ReflectionUtils.findField(
          AbstractShareKafkaMessageListenerContainer.class, "shareConsumerFactory");

  private WrappedShareConsumers() {}

  /** The acknowledgements of a wrapped consumer that go with its close if not sent before. */
  interface Acknowledgements {
    /**
     * Called before the acknowledgement is handed to spring-kafka (from any thread): sent with the
     * consumer's close unless the consumer sends it first.
     */
    void handedOver(ConsumerRecord<?, ?> record, AcknowledgeType type);

    /**
     * On the consumer's thread: acknowledges on the consumer every acknowledgement handed over and
     * not passed on by spring-kafka, which sends them with the consumer's next request; how many.
     * Once spring-kafka's loop has ended nobody else does, and the consumer cannot poll while a
     * record of its last poll is not acknowledged.
     */
    int acknowledgeHandedOver();
  }

  /**
   * Replaces the container's consumer factory by one whose consumers send renewals apart and, when
   * the container closes one, call {@code closing} with it first (on its thread) and then send its
   * acknowledgements handed over and not sent, within {@code closeTimeout}; returns what puts the
   * container's own factory back, or null if the field is not there (another spring-kafka).
   */
  static @Nullable Runnable apply(
      AbstractShareKafkaMessageListenerContainer<?, ?> container,
      Consumer<ShareConsumer<?, ?>> closing,
      Duration closeTimeout) {
    Field field = FACTORY;
    if (field == null) {
      log.warn(
          "Share container {}: renewals go with the container's polls, and acknowledgements made"
              + " as it stops are lost (this spring-kafka has no consumer factory field to wrap);"
              + " records fetched meanwhile may lose deliveries, and a record dead-lettered as the"
              + " container stops may be dead-lettered again",
          container.getListenerId());
      return null;
    }
    ReflectionUtils.makeAccessible(field);
    ShareConsumerFactory<?, ?> original =
        (ShareConsumerFactory<?, ?>) ReflectionUtils.getField(field, container);
    if (original == null || original instanceof Factory<?, ?>) {
      return null;
    }
    ReflectionUtils.setField(field, container, new Factory<>(original, closing, closeTimeout));
    return () -> ReflectionUtils.setField(field, container, original);
  }

  /** Makes the consumers of {@code delegate}, each wrapped. */
  private record Factory<K, V>(
      ShareConsumerFactory<K, V> delegate,
      Consumer<ShareConsumer<?, ?>> closing,
      Duration closeTimeout)
      implements ShareConsumerFactory<K, V> {
    @Override
    public ShareConsumer<K, V> createShareConsumer(
        @Nullable String groupId, @Nullable String clientId) {
      return wrap(delegate.createShareConsumer(groupId, clientId), closing, closeTimeout);
    }

    @Override
    public ShareConsumer<K, V> createShareConsumer(
        @Nullable String groupId, @Nullable String clientId, Map<String, Object> overrides) {
      return wrap(
          delegate.createShareConsumer(groupId, clientId, overrides), closing, closeTimeout);
    }

    @Override
    public Map<String, Object> getConfigurationProperties() {
      return delegate.getConfigurationProperties();
    }
  }

  @SuppressWarnings("unchecked")
  private static <K, V> ShareConsumer<K, V> wrap(
      ShareConsumer<K, V> consumer, Consumer<ShareConsumer<?, ?>> closing, Duration closeTimeout) {
    return (ShareConsumer<K, V>)
        Proxy.newProxyInstance(
            ShareConsumer.class.getClassLoader(),
            new Class<?>[] {ShareConsumer.class, Acknowledgements.class},
            new Wrapped(consumer, closing, closeTimeout));
  }

  private record Sent(String topic, int partition, long offset) {
    static Sent of(ConsumerRecord<?, ?> record) {
      return new Sent(record.topic(), record.partition(), record.offset());
    }
  }

  /**
   * Used by the container's consumer thread, as the consumer itself, but for {@code handedOver}.
   */
  private static final class Wrapped implements InvocationHandler {
    private final ShareConsumer<?, ?> consumer;
    private final Consumer<ShareConsumer<?, ?>> closing;
    private final Duration closeTimeout;
    private final Map<Sent, Map.Entry<ConsumerRecord<?, ?>, AcknowledgeType>> handedOver =
        new ConcurrentHashMap<>();
    private boolean renewalsPending;

    /** Whether terminal acknowledgements were made since the consumer last sent them. */
    private boolean acknowledgementsUnsent;

    /** The record the deserializer rejected in the last poll, until it is acknowledged. */
    private @Nullable RejectedByPoll<?, ?> rejected;

    /** Whether the next poll returns {@link #rejected} again, as if renewed. */
    private boolean handRejectedBack;

    /**
     * The record the deserializer rejected whose lock ran out while its dead letter was still
     * tried, until the worker decides that delivery: nothing is fetched meanwhile (see {@link
     * #poll}). Its acknowledgement is no longer sent (the broker would refuse it), so the other
     * records' renewals and acknowledgements are.
     */
    private @Nullable RejectedByPoll<?, ?> triedPastItsLock;

    /** Whether the next poll returns {@link #triedPastItsLock} again, as if renewed. */
    private boolean handLateBack;

    /** When a record the deserializer rejected was fetched: its lock runs from then. */
    private final ShareFetches fetches = new ShareFetches();

    /** The records renewed and not handed back yet: returned again, they are no fetch. */
    private final Set<Sent> outForRenewal = new HashSet<>();

    Wrapped(
        ShareConsumer<?, ?> consumer,
        Consumer<ShareConsumer<?, ?>> closing,
        Duration closeTimeout) {
      this.consumer = consumer;
      this.closing = closing;
      this.closeTimeout = closeTimeout;
    }

    @Override
    public @Nullable Object invoke(Object proxy, Method method, @Nullable Object[] args)
        throws Throwable {
      String name = method.getName();
      if (method.getDeclaringClass() == Object.class) {
        return switch (name) {
          case "equals" -> args != null && proxy == args[0];
          case "hashCode" -> System.identityHashCode(proxy);
          default -> "wrapped by consumer-dedup: " + consumer;
        };
      }
      if (method.getDeclaringClass() == Acknowledgements.class) {
        if (name.equals("acknowledgeHandedOver")) {
          return acknowledgeHandedOver();
        }
        if (args != null) {
          ConsumerRecord<?, ?> record = (ConsumerRecord<?, ?>) args[0];
          handedOver.put(Sent.of(record), Map.entry(record, (AcknowledgeType) args[1]));
        }
        return null;
      }
      if (name.equals("close")) {
        // spring-kafka ends its consumer's loop on an interrupt (the application's executor shut
        // down with shutdownNow) and closes the consumer: the interrupt asks for the stop under
        // way. Kept for after the close, not let cut it short: the listener's wait for the record
        // in hand returned at once, and the consumer's close, interrupted, sent nothing handed
        // over; the record, applied a moment later, was given back unacknowledged.
        boolean interrupted = Thread.interrupted();
        try {
          try {
            finishAndSend((ShareConsumer<?, ?>) proxy);
          } catch (Throwable e) {
            // An Error as the listener finishes (an OutOfMemoryError) still closes the consumer:
            // left open, it never left its group and its records stayed locked until their locks
            // ran out. The Error goes on to the container as thrown, a failed close added to it.
            interrupted |= Thread.interrupted();
            try {
              close(method, args);
            } catch (Throwable closeFailure) {
              e.addSuppressed(closeFailure);
            }
            throw e;
          }
          interrupted |= Thread.interrupted(); // one that came as the listener finished
          return close(method, args);
        } finally {
          if (interrupted) {
            Thread.currentThread().interrupt();
          }
        }
      }
      if (name.equals("poll")) {
        return poll(method, args);
      }
      if (rejected != null && name.startsWith("commit")) {
        // It would send the RELEASE the consumer holds for the rejected record by default.
        return name.equals("commitSync") ? Map.of() : null;
      }
      if (name.equals("acknowledge")
          && args != null
          && args[0] instanceof RejectedByPoll<?, ?> record) {
        acknowledgeRejected(record, (AcknowledgeType) args[1]);
        return null;
      }
      Object result = delegate(method, args);
      if (name.equals("acknowledge") && args != null) {
        if (args[args.length - 1] == AcknowledgeType.RENEW) {
          renewalsPending = true;
          if (args[0] instanceof ConsumerRecord<?, ?> record) {
            outForRenewal.add(Sent.of(record));
          }
        } else {
          acknowledgementsUnsent = true;
          if (args[0] instanceof ConsumerRecord<?, ?> record) {
            handedOver.remove(Sent.of(record));
          }
        }
      } else if (name.startsWith("commit")) {
        acknowledgementsUnsent = false;
      }
      return result;
    }

    /**
     * The consumer's poll; a record its deserializer rejects is returned alone, as a {@link
     * RejectedByPoll}, and while it waits for its acknowledgement nothing is polled: this returns
     * no record, or that one again if it was renewed meanwhile.
     */
    private @Nullable Object poll(Method method, @Nullable Object[] args) throws Throwable {
      RejectedByPoll<?, ?> inHand = rejected;
      if (inHand != null) {
        if (System.nanoTime() - inHand.lockEndsNanos() < 0) {
          if (handRejectedBack) {
            handRejectedBack = false;
            return only(inHand);
          }
          pause(args == null ? Duration.ZERO : (Duration) args[0]);
          return ConsumerRecords.empty();
        }
        // The dead letter took longer than the lock, or the lock ran out before the record was
        // handed over. Not a WARN: its acknowledgement, dropped, or the worker's own message says
        // so once (the user read three WARNs for one record whose lock had run out).
        log.debug(
            "{} was not acknowledged within its acquisition lock, which cannot be renewed; the"
                + " broker delivers it again",
            Coordinates.of(inHand));
        rejected = null;
        triedPastItsLock = inHand;
        handLateBack = handRejectedBack;
        handRejectedBack = false;
      }
      if (renewalsPending) {
        renewalsPending = false;
        sendRenewals(); // the other acknowledgements with them
      } else if (acknowledgementsUnsent) {
        // Sent apart, not with the poll: a poll that throws for a record the deserializer rejects
        // loses the acknowledgements it was to carry, and those records came again a lock later.
        consumer.commitAsync();
      }
      acknowledgementsUnsent = false;
      RejectedByPoll<?, ?> late = triedPastItsLock;
      if (late != null) {
        // Its dead letter still tried: a fetch now brings the broker's next delivery of it, which
        // waits for that try, and the one after it supersedes it untried. A try that outlasted two
        // locks spent three deliveries, and a dead-letter topic whose sends failed after the
        // producer's max.block.ms (60 s, twice the default lock) had the broker archive the record
        // without its dead letter after two tries. Fetched once the worker decides, as
        // DedupShareLoop fetches, each try costs one delivery.
        if (handLateBack) {
          handLateBack = false;
          return only(late); // renewed by the keeper, which holds it while the worker has it
        }
        if (outForRenewal.isEmpty()) {
          pause(args == null ? Duration.ZERO : (Duration) args[0]);
          return ConsumerRecords.empty();
        }
        // Polled to take back the other records out for renewal, as the share loop polls for them
        // while it holds a rejected record: not handed back, the keeper would forget them a lock
        // later, and their locks would run out.
      }
      fetches.pollStarts(System.nanoTime());
      try {
        ConsumerRecords<?, ?> polled =
            Objects.requireNonNull((ConsumerRecords<?, ?>) delegate(method, args));
        List<ConsumerRecord<?, ?>> fresh = new ArrayList<>();
        for (ConsumerRecord<?, ?> record : polled) {
          if (!outForRenewal.remove(Sent.of(record))) {
            fresh.add(record);
          }
        }
        if (polled.isEmpty()) {
          outForRenewal.clear(); // renewals the broker refused: those records are not handed back
        }
        fetches.returned(fresh, polled.count());
        return polled;
      } catch (RecordDeserializationException e) {
        // Counted from the fetch that brought it: see ShareFetches.
        long lockMs =
            consumer.acquisitionLockTimeoutMs().map(Integer::longValue).orElse(DEFAULT_LOCK_MS);
        RejectedByPoll<?, ?> record =
            new RejectedByPoll<>(
                e, fetches.rejected(e.topicPartition(), e.offset()) + lockMs * 1_000_000L);
        rejected = record;
        // Handed back by the next poll until this one returns it: an Error before then (a second
        // OutOfMemoryError as the line below is written) left it in hand, never handed over nor
        // dead-lettered, and the consumer, which polls nothing while it holds such a record,
        // stopped with the container.
        handRejectedBack = true;
        try {
          log.error(
              "{} cannot be deserialized (its {} was rejected); dead-lettering it before it is"
                  + " rejected",
              Coordinates.of(record),
              UndeserializableRecords.rejectedPart(e).orElse("key or value"),
              // Its cause is the deserializer's exception, which Logback prints: one whose
              // message throws came out of this log call, the container's consumer ended on it,
              // and the record, never dead-lettered, stopped each consumer that took it.
              FailureTexts.loggable(e));
        } catch (RuntimeException | Error lost) {
          // The line is lost; the record is returned for its dead letter.
        }
        ConsumerRecords<?, ?> only = only(record);
        handRejectedBack = false;
        return only;
      }
    }

    private static ConsumerRecords<?, ?> only(ConsumerRecord<?, ?> record) {
      return new ConsumerRecords<>(
          Map.of(new TopicPartition(record.topic(), record.partition()), List.of(record)),
          Map.of());
    }

    /** Lets the container's loop apply the acknowledgements queued meanwhile, not spin. */
    private static void pause(Duration timeout) {
      try {
        Thread.sleep(Math.min(timeout.toMillis(), REJECTED_PAUSE.toMillis()));
      } catch (InterruptedException e) {
        throw new InterruptException(e); // as the consumer's poll would, the flag set again
      }
    }

    /**
     * Acknowledges the record the deserializer rejected by offset, the one form kafka-clients takes
     * for it; whether it did. Its lock cannot be renewed (a RENEW would be its one acknowledgement,
     * its REJECT then refused): a RENEW has it handed back at the next poll, as a renewed record
     * comes back, also once its lock has run out while its dead letter is still tried. An
     * acknowledgement made after its lock ran out is dropped (the broker delivers it again), and
     * lets the consumer fetch again.
     */
    private boolean acknowledgeRejected(RejectedByPoll<?, ?> record, AcknowledgeType type) {
      RejectedByPoll<?, ?> inHand = rejected;
      if (inHand == null || !Sent.of(inHand).equals(Sent.of(record))) {
        handedOver.remove(Sent.of(record));
        if (triedPastItsLock == record) {
          if (type == AcknowledgeType.RENEW) {
            handLateBack = true;
          } else {
            triedPastItsLock = null; // decided: the next poll fetches again
            handLateBack = false;
          }
        }
        // A RELEASE only follows the worker's own message (the lock ran out before the record
        // was handed over, or its dead letter could not be written): dropped, it changes nothing
        // the broker does, and a WARN of it said the same thing again.
        if (type != AcknowledgeType.RENEW && type != AcknowledgeType.RELEASE) {
          log.warn(
              "{} not acknowledged ({}): its acquisition lock ran out; the broker delivers it again",
              Coordinates.of(record),
              type);
        }
        return false;
      }
      if (type == AcknowledgeType.RENEW) {
        handRejectedBack = true;
        return false;
      }
      rejected = null;
      handRejectedBack = false;
      handedOver.remove(Sent.of(record));
      consumer.acknowledge(record.topic(), record.partition(), record.offset(), type);
      acknowledgementsUnsent = true;
      return true;
    }

    /**
     * The consumer's close; spring-kafka's {@code close()} bounded by the close timeout rather than
     * kafka-clients' 30 s: against a broker that does not answer, a container's stop took the close
     * timeout (the handler in hand) and 30 s more.
     */
    private @Nullable Object close(Method method, @Nullable Object[] args) throws Throwable {
      if (args == null || args.length == 0) {
        consumer.close(closeTimeout);
        return null;
      }
      return delegate(method, args);
    }

    private @Nullable Object delegate(Method method, @Nullable Object[] args) throws Throwable {
      try {
        return method.invoke(consumer, args);
      } catch (InvocationTargetException e) {
        throw e.getCause();
      }
    }

    /**
     * Lets the listener finish the record in hand and hand over its decisions, then adds to the
     * close what spring-kafka did not send: acknowledged now, the close commits them.
     */
    private void finishAndSend(ShareConsumer<?, ?> proxy) {
      try {
        closing.accept(proxy);
      } catch (RuntimeException e) {
        log.warn("Could not finish the share listener's records before its consumer closed", e);
      }
      int sent = acknowledgeHandedOver();
      if (sent > 0) {
        log.info(
            "Share consumer closing: {} acknowledgement(s) that the container had not sent yet go"
                + " with its close",
            sent);
      }
    }

    @SuppressWarnings({"unchecked", "rawtypes"})
    private int acknowledgeHandedOver() {
      int sent = 0;
      for (Iterator<Map.Entry<ConsumerRecord<?, ?>, AcknowledgeType>> it =
              handedOver.values().iterator();
          it.hasNext(); ) {
        Map.Entry<ConsumerRecord<?, ?>, AcknowledgeType> entry = it.next();
        it.remove();
        try {
          if (!(entry.getKey() instanceof RejectedByPoll<?, ?> record)) {
            ((ShareConsumer) consumer)
                .acknowledge((ConsumerRecord) entry.getKey(), entry.getValue());
            sent++;
          } else if (acknowledgeRejected(record, entry.getValue())) {
            sent++;
          }
        } catch (RuntimeException e) {
          // No longer acquired by this consumer (its lock ran out, or it was renewed and not
          // fetched back): the broker delivers it again, as without this.
          log.debug("Could not acknowledge {} at close: {}", Sent.of(entry.getKey()), e.toString());
        }
      }
      return sent;
    }

    private void sendRenewals() {
      long lockMs =
          consumer.acquisitionLockTimeoutMs().map(Integer::longValue).orElse(DEFAULT_LOCK_MS);
      try {
        consumer.commitSync(Duration.ofMillis(Math.max(lockMs / 3, 50)));
      } catch (WakeupException | InterruptException e) {
        throw e;
      } catch (KafkaException e) {
        // Not sent yet, or no answer in time: the container's poll sends them, with its fetch.
        log.warn("Could not send lock renewals on their own: {}", e.toString());
      }
    }
  }
}
