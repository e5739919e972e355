/**
 * spring-kafka adapters: {@link io.consumerdedup.spring.Idempotent} on {@code @KafkaListener}
 * methods, the {@link io.consumerdedup.spring.IdempotentListenerInterceptor} that runs them through
 * the core's {@link io.consumerdedup.core.IdempotentExecutor}, and the wiring into spring-kafka's
 * record interceptors and {@code DefaultErrorHandler}.
 */
@NullMarked
package io.consumerdedup.spring;

import org.jspecify.annotations.NullMarked;
