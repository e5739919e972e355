/** The demo: runs each scenario without and with dedup and prints what happened. */
@NullMarked
package io.consumerdedup.examples;

import org.jspecify.annotations.NullMarked;
