/**
 * The container-level alternative to {@code @Idempotent}, for code that builds listener containers
 * by hand: {@link io.consumerdedup.spring.listener.IdempotentMessageListener} wraps a container's
 * record listener.
 */
@NullMarked
package io.consumerdedup.spring.listener;

import org.jspecify.annotations.NullMarked;
