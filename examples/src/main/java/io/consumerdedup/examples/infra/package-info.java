/** The PostgreSQL server and Kafka broker the demo runs on: embedded by default, or real ones. */
@NullMarked
package io.consumerdedup.examples.infra;

import org.jspecify.annotations.NullMarked;
