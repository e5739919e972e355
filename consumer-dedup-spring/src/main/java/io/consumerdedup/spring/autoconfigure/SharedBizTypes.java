package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.spring.IdempotentListenerPostProcessor.Listener;
import io.consumerdedup.spring.internal.ListenerAttributes;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
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
 * <p>Listeners of one group that share a biz type but read different topics start, named in a WARN:
 * that may be one action read from several topics, or a biz type copied along with a listener,
 * which would skip, say, the refund of an order whose payment was applied, with no trace above
 * DEBUG.
 *
 * <p>A listener's group is its {@code @KafkaListener} groupId, else its id when {@code idIsGroup},
 * else its container factory's group (container properties, then the consumer factory's {@code
 * group.id}), as spring-kafka decides it.
 */
final class SharedBizTypes {
  private static final Logger log = LoggerFactory.getLogger(SharedBizTypes.class);

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
      Listener first = byGroup.putIfAbsent(group, listener);
      if (byGroup.size() > 1) {
        throw refusal(listener.bizType(), byGroup);
      }
      if (first != null) {
        warnIfOtherTopics(group, first, listener);
      }
    }
  }

  private void warnIfOtherTopics(String group, Listener first, Listener other) {
    Set<String> firstTopics = topicsOf(first.kafkaListener());
    Set<String> otherTopics = topicsOf(other.kafkaListener());
    if (firstTopics == null || otherTopics == null || firstTopics.equals(otherTopics)) {
      return;
    }
    log.warn(
        "@Idempotent listeners {} (topics {}) and {} (topics {}) of group {} share biz type '{}':"
            + " a key one of them applied is skipped by the other as a duplicate. If they perform"
            + " different actions, give each its own biz type; if it is one action read from"
            + " several topics, list the biz type in consumer-dedup.shared-biz-types",
        first.method(),
        firstTopics,
        other.method(),
        otherTopics,
        group,
        first.bizType());
  }

  /** The topics the listener names, or null when it reads a pattern or they cannot be resolved. */
  private @Nullable Set<String> topicsOf(@Nullable KafkaListener listener) {
    if (listener == null || StringUtils.hasText(listener.topicPattern())) {
      return null;
    }
    try {
      Set<String> topics = new TreeSet<>();
      for (String topic : listener.topics()) {
        topics.addAll(Arrays.asList(StringUtils.tokenizeToStringArray(resolve(topic), ",")));
      }
      for (var partitions : listener.topicPartitions()) {
        topics.add(resolve(partitions.topic()));
      }
      return topics.isEmpty() ? null : topics;
    } catch (RuntimeException e) {
      // An expression that only spring-kafka can evaluate, as for the group.
      return null;
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
