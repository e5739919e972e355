package io.consumerdedup.spring.autoconfigure;

import java.lang.reflect.Field;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.time.Duration;
import java.util.Map;
import org.apache.kafka.clients.consumer.AcknowledgeType;
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
 * Has a share container's consumers send the renewals ({@code RENEW}) that consumer-dedup asks for
 * on their own, as {@code DedupShareLoop} does, before the container's next poll. spring-kafka 4.1
 * applies a renewal on the consumer's thread and polls: kafka-clients 4.2 sends it with a fetch,
 * which acquires new records and keeps them in its buffer until every record in hand is
 * acknowledged. Behind a long handler, or a copy waiting for another consumer's claim, their locks
 * run out there, unseen, a delivery spent each time, until the broker archives them unapplied. A
 * {@code commitSync} sends the renewals in a ShareAcknowledge, which acquires nothing, and the poll
 * after it only takes the renewed records back.
 */
final class RenewalsApart {
  private static final Logger log = LoggerFactory.getLogger(RenewalsApart.class);

  /** The broker's default lock, until the consumer reports the group's. */
  private static final long DEFAULT_LOCK_MS = 30_000;

  /** spring-kafka 4.1 has no setter for a container's consumer factory. */
  private static final @Nullable Field FACTORY =
      ReflectionUtils.findField(
          AbstractShareKafkaMessageListenerContainer.class, "shareConsumerFactory");

  private RenewalsApart() {}

  /**
   * Replaces the container's consumer factory by one whose consumers send renewals apart; returns
   * what puts the container's own back, or null if the field is not there (another spring-kafka).
   */
  static @Nullable Runnable apply(AbstractShareKafkaMessageListenerContainer<?, ?> container) {
    Field field = FACTORY;
    if (field == null) {
      log.warn(
          "Share container {}: renewals go with the container's polls (this spring-kafka has no"
              + " consumer factory field to wrap); records fetched meanwhile may lose deliveries",
          container.getListenerId());
      return null;
    }
    ReflectionUtils.makeAccessible(field);
    ShareConsumerFactory<?, ?> original =
        (ShareConsumerFactory<?, ?>) ReflectionUtils.getField(field, container);
    if (original == null || original instanceof Factory<?, ?>) {
      return null;
    }
    ReflectionUtils.setField(field, container, new Factory<>(original));
    return () -> ReflectionUtils.setField(field, container, original);
  }

  /** Makes the consumers of {@code delegate}, each sending its renewals apart. */
  private record Factory<K, V>(ShareConsumerFactory<K, V> delegate)
      implements ShareConsumerFactory<K, V> {
    @Override
    public ShareConsumer<K, V> createShareConsumer(
        @Nullable String groupId, @Nullable String clientId) {
      return renewingApart(delegate.createShareConsumer(groupId, clientId));
    }

    @Override
    public ShareConsumer<K, V> createShareConsumer(
        @Nullable String groupId, @Nullable String clientId, Map<String, Object> overrides) {
      return renewingApart(delegate.createShareConsumer(groupId, clientId, overrides));
    }

    @Override
    public Map<String, Object> getConfigurationProperties() {
      return delegate.getConfigurationProperties();
    }
  }

  @SuppressWarnings("unchecked")
  private static <K, V> ShareConsumer<K, V> renewingApart(ShareConsumer<K, V> consumer) {
    return (ShareConsumer<K, V>)
        Proxy.newProxyInstance(
            ShareConsumer.class.getClassLoader(),
            new Class<?>[] {ShareConsumer.class},
            new RenewingApart(consumer));
  }

  /** Used by the container's consumer thread only, as the consumer itself. */
  private static final class RenewingApart implements InvocationHandler {
    private final ShareConsumer<?, ?> consumer;
    private boolean renewalsPending;

    RenewingApart(ShareConsumer<?, ?> consumer) {
      this.consumer = consumer;
    }

    @Override
    public @Nullable Object invoke(Object proxy, Method method, @Nullable Object[] args)
        throws Throwable {
      String name = method.getName();
      if (method.getDeclaringClass() == Object.class) {
        return switch (name) {
          case "equals" -> args != null && proxy == args[0];
          case "hashCode" -> System.identityHashCode(proxy);
          default -> "renewing apart: " + consumer;
        };
      }
      if (name.equals("poll") && renewalsPending) {
        renewalsPending = false;
        sendRenewals();
      }
      Object result;
      try {
        result = method.invoke(consumer, args);
      } catch (InvocationTargetException e) {
        throw e.getCause();
      }
      if (name.equals("acknowledge")
          && args != null
          && args[args.length - 1] == AcknowledgeType.RENEW) {
        renewalsPending = true;
      }
      return result;
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
