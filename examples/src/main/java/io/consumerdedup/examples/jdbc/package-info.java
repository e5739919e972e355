/**
 * Plain-JDBC transactions for {@code DedupMode.TRANSACTIONAL}, without Spring: one transaction per
 * record, shared by the dedup store and the handler's own writes.
 */
@NullMarked
package io.consumerdedup.examples.jdbc;

import org.jspecify.annotations.NullMarked;
