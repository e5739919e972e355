@NullMarked
package io.consumerdedup.micrometer;

import org.jspecify.annotations.NullMarked;
