/**
 * Redelivery testing for Spring Boot: {@link io.consumerdedup.test.spring.RedeliverEachRecord} on a
 * test class hands every record to each {@code @Idempotent} listener twice and reports, in the
 * {@link io.consumerdedup.test.RedeliveryReport} bean, the listeners whose body ran twice.
 */
@NullMarked
package io.consumerdedup.test.spring;

import org.jspecify.annotations.NullMarked;
