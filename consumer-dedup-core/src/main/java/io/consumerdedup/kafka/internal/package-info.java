/**
 * Implementation of the Kafka adapters, shared with the Spring module: not API, may change in any
 * release.
 */
@NullMarked
package io.consumerdedup.kafka.internal;

import org.jspecify.annotations.NullMarked;
