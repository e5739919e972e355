/**
 * The dedup engine: {@link io.consumerdedup.core.IdempotentExecutor} claims a {@link
 * io.consumerdedup.core.DedupKey} in a {@link io.consumerdedup.core.DedupStore}, runs the handler,
 * and records SUCCESS or FAILED, so that each business action is applied once.
 */
@NullMarked
package io.consumerdedup.core;

import org.jspecify.annotations.NullMarked;
