/** Scenario 7's Spring Boot application: an {@code @Idempotent} {@code @KafkaListener}. */
@NullMarked
package io.consumerdedup.examples.spring;

import org.jspecify.annotations.NullMarked;
