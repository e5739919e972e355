/**
 * The container-level alternative to {@code @Idempotent}, for code that builds listener containers
 * by hand: {@link io.consumerdedup.spring.listener.IdempotentRecordInterceptor} is a record
 * interceptor that claims each record's key before the listener and records the outcome after it.
 */
@NullMarked
package io.consumerdedup.spring.listener;

import org.jspecify.annotations.NullMarked;
