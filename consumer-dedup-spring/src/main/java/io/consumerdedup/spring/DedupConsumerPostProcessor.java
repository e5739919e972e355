package io.consumerdedup.spring;

import io.consumerdedup.spring.internal.PollAwareConsumer;
import java.lang.reflect.Field;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.jspecify.annotations.Nullable;
import org.springframework.kafka.core.ConsumerFactory;
import org.springframework.kafka.core.ConsumerPostProcessor;
import org.springframework.kafka.core.DefaultKafkaConsumerFactory;
import org.springframework.kafka.listener.AbstractMessageListenerContainer;
import org.springframework.util.ReflectionUtils;

/**
 * Wraps each consumer a {@link DefaultKafkaConsumerFactory} creates so that {@link Idempotent}
 * record listeners claim the keys of a whole poll in one statement, and so that no offset commit
 * passes a record whose SUCCESS mark, written in the background, is not durable yet ({@link
 * PollAwareConsumer}). A consumer whose listeners do not use it is not changed in what it does.
 *
 * <p>{@link DedupContainers#configure} adds it to the consumer factory of each container it
 * prepares (the auto-configuration does so for every container); there is nothing to add by hand.
 */
public final class DedupConsumerPostProcessor implements ConsumerPostProcessor<Object, Object> {

  /** The one instance: a factory has it at most once. */
  public static final DedupConsumerPostProcessor INSTANCE = new DedupConsumerPostProcessor();

  // spring-kafka 4.0 has no getter for a container's consumer factory.
  private static final @Nullable Field CONSUMER_FACTORY =
      ReflectionUtils.findField(AbstractMessageListenerContainer.class, "consumerFactory");

  static {
    if (CONSUMER_FACTORY != null) {
      ReflectionUtils.makeAccessible(CONSUMER_FACTORY);
    }
  }

  private DedupConsumerPostProcessor() {}

  @Override
  public Consumer<Object, Object> apply(Consumer<Object, Object> consumer) {
    return consumer instanceof PollAwareConsumer ? consumer : new PollAwareConsumer<>(consumer);
  }

  /**
   * Adds this post-processor to the consumer factory of {@code container}, unless it has it.
   *
   * @return why it could not be added (the factory is not a {@code DefaultKafkaConsumerFactory}),
   *     or null
   */
  @SuppressWarnings({"unchecked", "rawtypes"})
  static @Nullable String addTo(AbstractMessageListenerContainer<?, ?> container) {
    Object factory =
        CONSUMER_FACTORY == null ? null : ReflectionUtils.getField(CONSUMER_FACTORY, container);
    if (!(factory instanceof DefaultKafkaConsumerFactory<?, ?> consumers)) {
      return factory instanceof ConsumerFactory<?, ?>
          ? "its consumer factory is a " + factory.getClass().getName()
          : "its consumer factory cannot be read";
    }
    synchronized (consumers) {
      if (!consumers.getPostProcessors().contains(INSTANCE)) {
        ((DefaultKafkaConsumerFactory) consumers).addPostProcessor(INSTANCE);
      }
    }
    return null;
  }

  /**
   * Whether the consumers of {@code container} commit their positions by themselves ({@code
   * enable.auto.commit}), as spring-kafka decides it when the container starts: the container's
   * consumer properties (those of {@code @KafkaListener(properties)} among them) first, then its
   * consumer factory's configuration; false when neither sets it (spring-kafka then sets it false).
   * Such a consumer commits from within its polls, past every record handed to the listener, so no
   * commit can be held back behind SUCCESS marks written in the background.
   */
  static boolean autoCommits(AbstractMessageListenerContainer<?, ?> container) {
    String override =
        container
            .getContainerProperties()
            .getKafkaConsumerProperties()
            .getProperty(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG);
    if (override != null) {
      return Boolean.parseBoolean(override);
    }
    Object factory =
        CONSUMER_FACTORY == null ? null : ReflectionUtils.getField(CONSUMER_FACTORY, container);
    return factory instanceof ConsumerFactory<?, ?> consumers
        && consumers
            .getConfigurationProperties()
            .containsKey(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG)
        && consumers.isAutoCommit();
  }

  @Override
  public String toString() {
    return "DedupConsumerPostProcessor";
  }
}
