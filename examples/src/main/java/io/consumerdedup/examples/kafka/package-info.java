/**
 * A plain kafka-clients poll loop (commit, seek back and retry, dead letter) and a producer helper.
 */
@NullMarked
package io.consumerdedup.examples.kafka;

import org.jspecify.annotations.NullMarked;
