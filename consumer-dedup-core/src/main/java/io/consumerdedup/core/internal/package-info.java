@NullMarked
package io.consumerdedup.core.internal;

import org.jspecify.annotations.NullMarked;
