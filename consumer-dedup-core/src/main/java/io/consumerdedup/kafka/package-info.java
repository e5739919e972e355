@NullMarked
package io.consumerdedup.kafka;

import org.jspecify.annotations.NullMarked;
