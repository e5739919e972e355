/** The numbers of each run and the fixed-width report printed from them. */
@NullMarked
package io.consumerdedup.examples.report;

import org.jspecify.annotations.NullMarked;
