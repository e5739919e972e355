package io.consumerdedup.spring.autoconfigure;

import java.lang.reflect.Field;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.time.Duration;
import java.util.Iterator;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Consumer;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.InterruptException;
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
 *       passed on yet is sent, on the consumer's thread, with the close.
 * </ul>
 */
final class WrappedShareConsumers {
  private static final Logger log = LoggerFactory.getLogger(WrappedShareConsumers.class);

  /** The broker's default lock, until the consumer reports the group's. */
  private static final long DEFAULT_LOCK_MS = 30_000;

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
   * acknowledgements handed over and not sent; returns what puts the container's own factory back,
   * or null if the field is not there (another spring-kafka).
   */
  static @Nullable Runnable apply(
      AbstractShareKafkaMessageListenerContainer<?, ?> container,
      Consumer<ShareConsumer<?, ?>> closing) {
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
    ReflectionUtils.setField(field, container, new Factory<>(original, closing));
    return () -> ReflectionUtils.setField(field, container, original);
  }

  /** Makes the consumers of {@code delegate}, each wrapped. */
  private record Factory<K, V>(
      ShareConsumerFactory<K, V> delegate, Consumer<ShareConsumer<?, ?>> closing)
      implements ShareConsumerFactory<K, V> {
    @Override
    public ShareConsumer<K, V> createShareConsumer(
        @Nullable String groupId, @Nullable String clientId) {
      return wrap(delegate.createShareConsumer(groupId, clientId), closing);
    }

    @Override
    public ShareConsumer<K, V> createShareConsumer(
        @Nullable String groupId, @Nullable String clientId, Map<String, Object> overrides) {
      return wrap(delegate.createShareConsumer(groupId, clientId, overrides), closing);
    }

    @Override
    public Map<String, Object> getConfigurationProperties() {
      return delegate.getConfigurationProperties();
    }
  }

  @SuppressWarnings("unchecked")
  private static <K, V> ShareConsumer<K, V> wrap(
      ShareConsumer<K, V> consumer, Consumer<ShareConsumer<?, ?>> closing) {
    return (ShareConsumer<K, V>)
        Proxy.newProxyInstance(
            ShareConsumer.class.getClassLoader(),
            new Class<?>[] {ShareConsumer.class, Acknowledgements.class},
            new Wrapped(consumer, closing));
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
    private final Map<Sent, Map.Entry<ConsumerRecord<?, ?>, AcknowledgeType>> handedOver =
        new ConcurrentHashMap<>();
    private boolean renewalsPending;

    Wrapped(ShareConsumer<?, ?> consumer, Consumer<ShareConsumer<?, ?>> closing) {
      this.consumer = consumer;
      this.closing = closing;
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
              delegate(method, args);
            } catch (Throwable closeFailure) {
              e.addSuppressed(closeFailure);
            }
            throw e;
          }
          interrupted |= Thread.interrupted(); // one that came as the listener finished
          return delegate(method, args);
        } finally {
          if (interrupted) {
            Thread.currentThread().interrupt();
          }
        }
      }
      if (name.equals("poll") && renewalsPending) {
        renewalsPending = false;
        sendRenewals();
      }
      Object result = delegate(method, args);
      if (name.equals("acknowledge") && args != null) {
        if (args[args.length - 1] == AcknowledgeType.RENEW) {
          renewalsPending = true;
        } else if (args[0] instanceof ConsumerRecord<?, ?> record) {
          handedOver.remove(Sent.of(record));
        }
      }
      return result;
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
          ((ShareConsumer) consumer).acknowledge((ConsumerRecord) entry.getKey(), entry.getValue());
          sent++;
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
