package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.spring.IdempotentListenerPostProcessor.Listener;
import io.consumerdedup.spring.internal.ListenerAttributes;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.jspecify.annotations.Nullable;
import org.springframework.beans.factory.config.ConfigurableBeanFactory;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.annotation.KafkaListenerAnnotationBeanPostProcessor;
import org.springframework.kafka.config.AbstractKafkaListenerContainerFactory;
import org.springframework.util.StringUtils;

/**
 * Refuses {@code @Idempotent} listeners of different consumer groups that share a biz type: the
 * dedup key is {@code (bizType, business key)}, so each group would skip the keys the other already
 * applied as duplicates, and its own action would never run for them. A biz type listed in {@code
 * consumer-dedup.shared-biz-types} is shared on purpose and allowed.
 *
 * <p>A listener's group is its {@code @KafkaListener} groupId, else its id when {@code idIsGroup},
 * else its container factory's group (container properties, then the consumer factory's {@code
 * group.id}), as spring-kafka decides it.
 */
final class SharedBizTypes {
  private final ConfigurableBeanFactory beanFactory;
  private final Set<String> allowed;

  SharedBizTypes(ConfigurableBeanFactory beanFactory, Set<String> allowed) {
    this.beanFactory = beanFactory;
    this.allowed = allowed;
  }

  /**
   * @throws SharedBizTypeException two listeners of different groups share a biz type that is not
   *     allowed
   */
  void check(List<Listener> listeners) {
    Map<String, Map<String, Listener>> byBizTypeAndGroup = new LinkedHashMap<>();
    for (Listener listener : listeners) {
      String group = groupOf(listener.kafkaListener());
      if (group == null || allowed.contains(listener.bizType())) {
        continue;
      }
      Map<String, Listener> byGroup =
          byBizTypeAndGroup.computeIfAbsent(listener.bizType(), b -> new LinkedHashMap<>());
      byGroup.putIfAbsent(group, listener);
      if (byGroup.size() > 1) {
        throw refusal(listener.bizType(), byGroup);
      }
    }
  }

  private static SharedBizTypeException refusal(String bizType, Map<String, Listener> byGroup) {
    var groups = List.copyOf(byGroup.entrySet());
    return new SharedBizTypeException(
        "@Idempotent listeners "
            + groups.get(0).getValue().method()
            + " (group "
            + groups.get(0).getKey()
            + ") and "
            + groups.get(1).getValue().method()
            + " (group "
            + groups.get(1).getKey()
            + ") share biz type '"
            + bizType
            + "': each group would skip the keys the other applied as duplicates, and its own"
            + " action would never run for them",
        "Give each kind of action its own biz type. If both groups perform the same action and it"
            + " must run once across them, list the biz type in consumer-dedup.shared-biz-types");
  }

  /** The listener's consumer group, or null when it cannot be known before the container runs. */
  private @Nullable String groupOf(@Nullable KafkaListener listener) {
    if (listener == null) {
      return null;
    }
    try {
      String groupId = resolve(listener.groupId());
      if (StringUtils.hasText(groupId)) {
        return groupId;
      }
      String id = resolve(listener.id());
      if (listener.idIsGroup() && StringUtils.hasText(id)) {
        return id;
      }
      String factoryName = resolve(listener.containerFactory());
      return factoryGroup(
          StringUtils.hasText(factoryName)
              ? factoryName
              : KafkaListenerAnnotationBeanPostProcessor
                  .DEFAULT_KAFKA_LISTENER_CONTAINER_FACTORY_BEAN_NAME);
    } catch (RuntimeException e) {
      // An expression that only spring-kafka can evaluate (say one naming __listener).
      return null;
    }
  }

  private @Nullable String factoryGroup(String factoryName) {
    if (!beanFactory.containsBean(factoryName)
        || !(beanFactory.getBean(factoryName)
            instanceof AbstractKafkaListenerContainerFactory<?, ?, ?> factory)) {
      return null;
    }
    String containerGroup = factory.getContainerProperties().getGroupId();
    if (StringUtils.hasText(containerGroup)) {
      return containerGroup;
    }
    Object consumerGroup =
        factory.getConsumerFactory() == null
            ? null
            : factory
                .getConsumerFactory()
                .getConfigurationProperties()
                .get(ConsumerConfig.GROUP_ID_CONFIG);
    return consumerGroup == null || consumerGroup.toString().isBlank()
        ? null
        : consumerGroup.toString();
  }

  private String resolve(String value) {
    return ListenerAttributes.resolve(beanFactory, value);
  }
}
