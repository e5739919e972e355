/** One class per incident that makes people need dedup; each runs without and with it. */
@NullMarked
package io.consumerdedup.examples.scenario;

import org.jspecify.annotations.NullMarked;
