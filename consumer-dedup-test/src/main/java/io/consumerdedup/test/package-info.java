/**
 * For the tests of applications that use consumer-dedup: {@link
 * io.consumerdedup.test.InMemoryDedupStore} (a store without a database), {@link
 * io.consumerdedup.test.DedupStoreContract} (the behaviour every {@link
 * io.consumerdedup.core.DedupStore} must have, as JUnit 5 tests) and {@link
 * io.consumerdedup.test.RedeliveryReport} (each record handed to the handler twice, and every
 * handler body that ran twice named).
 */
@NullMarked
package io.consumerdedup.test;

import org.jspecify.annotations.NullMarked;
