/**
 * The scenarios' consumers, built from one {@link io.consumerdedup.examples.kafka.ConsumerSetup}:
 * without dedup a naive poll loop (commit, seek back and retry, dead letter), with dedup the
 * library's {@code DedupPollLoop} and {@code KafkaDeadLetterPublisher}; and a producer helper.
 */
@NullMarked
package io.consumerdedup.examples.kafka;

import org.jspecify.annotations.NullMarked;
