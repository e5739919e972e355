package io.consumerdedup.spring.autoconfigure;

import java.util.function.IntBinaryOperator;
import org.jspecify.annotations.Nullable;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.listener.AbstractMessageListenerContainer;

/**
 * The lifecycle phase the listener containers start and stop in: the registry's, or the containers'
 * own ({@code AbstractMessageListenerContainer}'s default), whichever {@code pick} takes.
 */
final class ContainerPhases {
  private ContainerPhases() {}

  static int of(@Nullable KafkaListenerEndpointRegistry endpoints, IntBinaryOperator pick) {
    return endpoints == null
        ? AbstractMessageListenerContainer.DEFAULT_PHASE
        : pick.applyAsInt(endpoints.getPhase(), AbstractMessageListenerContainer.DEFAULT_PHASE);
  }
}
