package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.spring.DedupContainers;
import io.consumerdedup.spring.DedupErrorClassification;
import io.consumerdedup.spring.IdempotentExecutors;
import io.consumerdedup.spring.IdempotentListenerPostProcessor;
import java.time.Duration;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.beans.factory.BeanFactory;
import org.springframework.beans.factory.BeanFactoryAware;
import org.springframework.beans.factory.ListableBeanFactory;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.beans.factory.config.ConfigurableBeanFactory;
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
public final class DedupListenerContainersConfigurer implements SmartLifecycle, BeanFactoryAware {
  private static final Logger log =
      LoggerFactory.getLogger(DedupListenerContainersConfigurer.class);

  private final ObjectProvider<KafkaListenerEndpointRegistry> registry;
  private final ObjectProvider<DestinationTopicResolver> retryTopicResolvers;
  private final ObjectProvider<IdempotentListenerPostProcessor> listeners;
  private final IdempotentExecutors executors;
  private final ConsumerDedupProperties properties;
  private final List<ShareListeners.Wrapped> shareListeners = new CopyOnWriteArrayList<>();
  private volatile boolean running;
  private @Nullable BeanFactory beanFactory;

  public DedupListenerContainersConfigurer(
      ObjectProvider<KafkaListenerEndpointRegistry> registry,
      ObjectProvider<DestinationTopicResolver> retryTopicResolvers,
      ObjectProvider<IdempotentListenerPostProcessor> listeners,
      IdempotentExecutors executors,
      ConsumerDedupProperties properties) {
    this.registry = registry;
    this.retryTopicResolvers = retryTopicResolvers;
    this.listeners = listeners;
    this.executors = executors;
    this.properties = properties;
  }

  @Override
  public void setBeanFactory(BeanFactory beanFactory) {
    this.beanFactory = beanFactory;
  }

  /**
   * @throws io.consumerdedup.core.DedupConfigurationException {@code @Idempotent} listeners of
   *     different consumer groups share a biz type ({@link SharedBizTypes})
   */
  @Override
  public void start() {
    try {
      configure();
    } catch (RuntimeException | Error e) {
      // Nobody stops a lifecycle whose start failed: the share listeners wrapped before the
      // failure would keep their dead-letter producers running after the failed start.
      ShareListeners.closeAll(shareListeners, e);
      shareListeners.clear();
      throw e;
    }
  }

  private void configure() {
    IdempotentListenerPostProcessor found = listeners.getIfAvailable();
    KafkaListenerEndpointRegistry endpoints = registry.getIfAvailable();
    if (beanFactory instanceof ConfigurableBeanFactory configurable) {
      new ShareContainers(configurable)
          .check(
              found == null ? List.of() : found.listeners(),
              endpoints == null ? List.of() : endpoints.getAllListenerContainers());
      if (ShareContainers.RENEWAL_AVAILABLE
          && endpoints != null
          && configurable instanceof ListableBeanFactory listable) {
        shareListeners.addAll(
            ShareListeners.configure(endpoints.getAllListenerContainers(), listable, properties));
      }
    }
    if (found != null) {
      if (beanFactory instanceof ConfigurableBeanFactory configurable) {
        new SharedBizTypes(configurable, properties.getSharedBizTypes()).check(found.listeners());
      }
      found.listeners().forEach(this::report);
    }
    // Registered by spring-kafka as a DestinationTopicResolver, whatever its class.
    retryTopicResolvers
        .orderedStream()
        .filter(DefaultDestinationTopicResolver.class::isInstance)
        .forEach(
            resolver ->
                DedupErrorClassification.applyTo((DefaultDestinationTopicResolver) resolver));
    if (endpoints == null) {
      running = true;
      return;
    }
    for (MessageListenerContainer container : endpoints.getAllListenerContainers()) {
      if (container instanceof AbstractMessageListenerContainer<?, ?> configurable
          && !configurable.isRunning()) {
        Duration initialBackoff = properties.getHold().getInitialBackoff();
        Duration maxBackoff = properties.getHold().getMaxBackoff();
        if (found != null) {
          found.configure(configurable, initialBackoff, maxBackoff, properties.isClaimsPerPoll());
        } else {
          DedupContainers.configure(configurable, initialBackoff, maxBackoff, Set.of());
        }
      }
    }
    running = true;
  }

  /**
   * One line per idempotent listener, so that a newcomer sees what is protected and how (building
   * its executor here also checks its settings before the first record).
   */
  private void report(IdempotentListenerPostProcessor.Listener listener) {
    IdempotentExecutor executor = executors.executor(listener.overrides());
    log.info(
        "Idempotent listener {}{}: biz type '{}', key from {}, mode {}, lease {}, {}{}",
        listener.method(),
        listener.listenerId().isEmpty() ? "" : " (id " + listener.listenerId() + ")",
        listener.bizType(),
        listener.keySource(),
        executor.mode(),
        DedupPropertiesCheck.print(executor.lease()),
        // The executor's store, not consumer-dedup.table-name: a store bean of the application's
        // own names its table itself, or is no table at all.
        executor.store() instanceof JdbcDedupStore jdbc
            ? "table " + jdbc.tableName()
            : "store " + executor.store().getClass().getSimpleName(),
        listener.caveat().isEmpty() ? "" : "; " + listener.caveat());
  }

  /**
   * Before the containers stop ({@link ShareListenersStopFirst}): every share listener's workers
   * stop after their record in hand, all at once, spring-kafka then stopping the share containers
   * one after the other.
   */
  void shareListenersStopping() {
    for (ShareListeners.Wrapped share : shareListeners) {
      try {
        share.stopping();
      } catch (RuntimeException e) {
        log.warn("Could not stop a share-group listener's worker", e);
      }
    }
  }

  /** After the containers stopped: stops the share listeners' workers. */
  @Override
  public void stop() {
    running = false;
    for (ShareListeners.Wrapped share : shareListeners) {
      try {
        share.close();
      } catch (Exception e) {
        log.warn("Could not stop a share-group listener's worker", e);
      }
    }
    shareListeners.clear();
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
