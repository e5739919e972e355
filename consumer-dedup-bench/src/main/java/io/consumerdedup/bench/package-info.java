/**
 * The benchmark of consumer-dedup against a plain consumer and its peers (Apache Camel's and Spring
 * Integration's JDBC stores): one program, {@link io.consumerdedup.bench.Bench}, in one JVM, over
 * one in-JVM Kafka broker and one PostgreSQL database of its own.
 *
 * <p>A compared variant is one class implementing {@link io.consumerdedup.bench.Variant}.
 */
@NullMarked
package io.consumerdedup.bench;

import org.jspecify.annotations.NullMarked;
