@NullMarked
package io.consumerdedup.jdbc.internal;

import org.jspecify.annotations.NullMarked;
