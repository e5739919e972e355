package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.spring.IdempotentListenerPostProcessor.Listener;
import io.consumerdedup.spring.internal.ListenerAttributes;
import java.lang.reflect.Method;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.beans.factory.config.ConfigurableBeanFactory;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.annotation.KafkaListenerAnnotationBeanPostProcessor;
import org.springframework.kafka.config.ShareKafkaListenerContainerFactory;
import org.springframework.kafka.listener.AbstractShareKafkaMessageListenerContainer;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.support.ShareAcknowledgment;
import org.springframework.util.ClassUtils;
import org.springframework.util.StringUtils;

/**
 * What consumer-dedup does at start-up with share-group containers (KIP-932 queues, {@code
 * ShareKafkaListenerContainerFactory}).
 *
 * <p>A share group hands each record to one consumer under a time-limited acquisition lock, and
 * counts every delivery: a copy that meets another consumer's live claim must keep its lock
 * (spring-kafka 4.1's {@code ShareAcknowledgment.renew()}, kafka-clients 4.2's {@code
 * AcknowledgeType.RENEW}) rather than be released, or its delivery count runs out and the broker
 * archives it unapplied. On spring-kafka 4.1 the container of each {@code @Idempotent} share
 * listener is put in {@code ShareAckMode.MANUAL} and its listener wrapped in a {@link
 * DedupShareListener}, which acknowledges each record as {@code DedupShareLoop} does; listener
 * shapes that cannot be protected stop the application. spring-kafka 4.0 has share containers but
 * no renewal, so on Boot 4.0 an {@code @Idempotent} listener in one is refused and every share
 * container is named in a warning: its listeners are not protected.
 */
final class ShareContainers {
  private static final Logger log = LoggerFactory.getLogger(ShareContainers.class);

  /** spring-kafka 4.1 and later: a share listener can renew its record's lock. */
  static final boolean RENEWAL_AVAILABLE = ClassUtils.hasMethod(ShareAcknowledgment.class, "renew");

  private final ConfigurableBeanFactory beanFactory;

  ShareContainers(ConfigurableBeanFactory beanFactory) {
    this.beanFactory = beanFactory;
  }

  /**
   * On a spring-kafka without renewal: warns about each share container, then refuses an {@code
   * Idempotent} listener whose container factory makes share containers. On spring-kafka 4.1:
   * refuses such a listener if no share container calls it (a {@code @KafkaHandler} of a
   * class-level {@code @KafkaListener}), since it could not be protected.
   *
   * @throws UnsupportedShareListenerException an {@code @Idempotent} listener is in a share
   *     container that cannot be protected
   */
  void check(List<Listener> listeners, Collection<MessageListenerContainer> containers) {
    if (!RENEWAL_AVAILABLE) {
      for (MessageListenerContainer container : containers) {
        if (container instanceof AbstractShareKafkaMessageListenerContainer<?, ?> share) {
          log.warn(
              "Share-group container {} (group {}): consumer-dedup does not protect its listener"
                  + " on spring-kafka {}, which cannot renew a record's acquisition lock; share"
                  + " groups need spring-kafka 4.1 (Spring Boot 4.1) and kafka-clients 4.2",
              share.getListenerId(),
              share.getGroupId(),
              springKafkaVersion());
        }
      }
    }
    Set<String> protectable = new HashSet<>();
    if (RENEWAL_AVAILABLE) {
      for (MessageListenerContainer container : containers) {
        Method method = ShareListeners.idempotentMethod(container);
        if (method != null) {
          protectable.add(ShareListeners.nameOf(method));
        }
      }
    }
    for (Listener listener : listeners) {
      String factory = shareFactoryOf(listener.kafkaListener());
      if (factory != null && !protectable.contains(listener.method())) {
        throw refusal(listener, factory);
      }
    }
  }

  private static UnsupportedShareListenerException refusal(Listener listener, String factory) {
    String why =
        RENEWAL_AVAILABLE
            ? "consumer-dedup protects a share-group listener that is a @KafkaListener method;"
                + " this one has no share container calling it (a @KafkaHandler of a class-level"
                + " @KafkaListener, or a container that is not a ShareKafkaMessageListenerContainer)"
            : "on spring-kafka "
                + springKafkaVersion()
                + " a share listener cannot renew its record's acquisition lock, so a copy that"
                + " waits for another consumer's claim would use up the record's delivery count"
                + " and the broker would archive it unapplied; share groups need spring-kafka 4.1"
                + " (Spring Boot 4.1) and kafka-clients 4.2";
    String action =
        RENEWAL_AVAILABLE
            ? "Put @KafkaListener on the @Idempotent method itself"
            : "Upgrade to Spring Boot 4.1 (spring-kafka 4.1, kafka-clients 4.2), or give the"
                + " listener a consumer-group container factory (a"
                + " ConcurrentKafkaListenerContainerFactory, such as Spring Boot's default one), or"
                + " consume the share group with consumer-dedup-core's DedupShareLoop"
                + " (docs/share-groups.md)";
    return new UnsupportedShareListenerException(
        "@Idempotent listener "
            + listener.method()
            + " runs in a share-group container (factory '"
            + factory
            + "', a ShareKafkaListenerContainerFactory): "
            + why,
        action);
  }

  private static String springKafkaVersion() {
    String version = ShareAcknowledgment.class.getPackage().getImplementationVersion();
    return version == null ? "4.0" : version;
  }

  /** The name of the listener's container factory if it is a share one, else null. */
  private @Nullable String shareFactoryOf(@Nullable KafkaListener listener) {
    if (listener == null) {
      return null;
    }
    String name;
    try {
      name = resolve(listener.containerFactory());
    } catch (RuntimeException e) {
      // An expression that only spring-kafka can evaluate (say one naming __listener).
      return null;
    }
    if (!StringUtils.hasText(name)) {
      name =
          KafkaListenerAnnotationBeanPostProcessor
              .DEFAULT_KAFKA_LISTENER_CONTAINER_FACTORY_BEAN_NAME;
    }
    return beanFactory.containsBean(name)
            && beanFactory.isTypeMatch(name, ShareKafkaListenerContainerFactory.class)
        ? name
        : null;
  }

  private String resolve(String value) {
    return ListenerAttributes.resolve(beanFactory, value);
  }
}
