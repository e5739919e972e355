package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.spring.DedupContainers;
import io.consumerdedup.spring.DedupErrorClassification;
import java.time.Duration;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.context.SmartLifecycle;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.listener.AbstractMessageListenerContainer;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.retrytopic.DefaultDestinationTopicResolver;
import org.springframework.kafka.retrytopic.DestinationTopicResolver;

/**
 * Runs {@link DedupContainers#configure} on every listener container of the application (those of
 * {@code @KafkaListener} endpoints, of {@code @RetryableTopic} retry topics, and container beans)
 * just before they start: its phase precedes the containers' own. It also teaches the retry topics'
 * destination resolver which records to send straight to the dead-letter topic ({@link
 * DedupErrorClassification}); spring-kafka registers that resolver too late for a bean
 * post-processor. Containers registered later, at run time, are configured by whoever creates them.
 */
public final class DedupListenerContainersConfigurer implements SmartLifecycle {
  private final ObjectProvider<KafkaListenerEndpointRegistry> registry;
  private final ObjectProvider<DestinationTopicResolver> retryTopicResolvers;
  private final Duration initialHoldBackOff;
  private final Duration maxHoldBackOff;
  private volatile boolean running;

  public DedupListenerContainersConfigurer(
      ObjectProvider<KafkaListenerEndpointRegistry> registry,
      ObjectProvider<DestinationTopicResolver> retryTopicResolvers,
      Duration initialHoldBackOff,
      Duration maxHoldBackOff) {
    this.registry = registry;
    this.retryTopicResolvers = retryTopicResolvers;
    this.initialHoldBackOff = initialHoldBackOff;
    this.maxHoldBackOff = maxHoldBackOff;
  }

  @Override
  public void start() {
    // Registered by spring-kafka as a DestinationTopicResolver, whatever its class.
    retryTopicResolvers
        .orderedStream()
        .filter(DefaultDestinationTopicResolver.class::isInstance)
        .forEach(
            resolver ->
                DedupErrorClassification.applyTo((DefaultDestinationTopicResolver) resolver));
    KafkaListenerEndpointRegistry endpoints = registry.getIfAvailable();
    if (endpoints == null) {
      running = true;
      return;
    }
    for (MessageListenerContainer container : endpoints.getAllListenerContainers()) {
      if (container instanceof AbstractMessageListenerContainer<?, ?> configurable
          && !configurable.isRunning()) {
        DedupContainers.configure(configurable, initialHoldBackOff, maxHoldBackOff);
      }
    }
    running = true;
  }

  @Override
  public void stop() {
    running = false;
  }

  @Override
  public boolean isRunning() {
    return running;
  }

  /**
   * Just before the containers, which start in {@code AbstractMessageListenerContainer}'s phase.
   */
  @Override
  public int getPhase() {
    KafkaListenerEndpointRegistry endpoints = registry.getIfAvailable();
    int containers =
        endpoints == null
            ? AbstractMessageListenerContainer.DEFAULT_PHASE
            : Math.min(endpoints.getPhase(), AbstractMessageListenerContainer.DEFAULT_PHASE);
    return containers - 1;
  }
}
