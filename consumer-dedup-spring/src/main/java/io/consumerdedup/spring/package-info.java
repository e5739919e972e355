/**
 * spring-kafka adapters: {@link io.consumerdedup.spring.Idempotent} on {@code @KafkaListener}
 * methods, the {@link io.consumerdedup.spring.IdempotentListenerInterceptor} that runs them through
 * the core's {@link io.consumerdedup.core.IdempotentExecutor}, and the wiring into spring-kafka's
 * record interceptors and {@code DefaultErrorHandler}.
 *
 * <p>API: {@link io.consumerdedup.spring.Idempotent}, {@link
 * io.consumerdedup.spring.DedupContainers} (containers built by hand), {@link
 * io.consumerdedup.spring.DedupErrorClassification}, {@link
 * io.consumerdedup.spring.RetryLaterErrorHandler} and {@link
 * io.consumerdedup.spring.RetryLaterAfterRollbackProcessor} (error handling you compose yourself),
 * {@link io.consumerdedup.spring.IdempotentExecutors} and {@link
 * io.consumerdedup.spring.IdempotentListenerInterceptor} (beans you may replace). {@link
 * io.consumerdedup.spring.IdempotentListenerPostProcessor} and everything in {@code
 * io.consumerdedup.spring.internal} are internal.
 */
@NullMarked
package io.consumerdedup.spring;

import org.jspecify.annotations.NullMarked;
