package io.consumerdedup.spring.autoconfigure;

import org.springframework.beans.factory.ObjectProvider;
import org.springframework.context.SmartLifecycle;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;

/**
 * Tells the {@code @Idempotent} share listeners that the application stops, just before the
 * listener containers stop (its phase follows theirs, and a later phase stops first). spring-kafka
 * 4.1 stops share containers one after the other, each until its consumers are closed, and each
 * consumer's close waits for its own handler in hand: told only then, the stop took the sum of the
 * close timeouts (a minute with two listeners and the default 30 s, past the 30 s a platform
 * usually gives a stopping process before it kills it), and a container not stopped yet kept
 * starting its handler on new records. Told here, every worker stops after its record in hand at
 * once, and each consumer's close waits at most until one close timeout after this.
 */
final class ShareListenersStopFirst implements SmartLifecycle {
  private final DedupListenerContainersConfigurer configurer;
  private final ObjectProvider<KafkaListenerEndpointRegistry> registry;
  private volatile boolean running;

  ShareListenersStopFirst(
      DedupListenerContainersConfigurer configurer,
      ObjectProvider<KafkaListenerEndpointRegistry> registry) {
    this.configurer = configurer;
    this.registry = registry;
  }

  @Override
  public void start() {
    running = true;
  }

  @Override
  public void stop() {
    running = false;
    configurer.shareListenersStopping();
  }

  @Override
  public boolean isRunning() {
    return running;
  }

  /** Just after the containers', which start in the registry's or the containers' own phase. */
  @Override
  public int getPhase() {
    int containers = ContainerPhases.of(registry.getIfAvailable(), Math::max);
    return containers == Integer.MAX_VALUE ? containers : containers + 1;
  }
}
