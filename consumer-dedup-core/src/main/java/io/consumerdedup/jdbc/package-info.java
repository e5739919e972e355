@NullMarked
package io.consumerdedup.jdbc;

import org.jspecify.annotations.NullMarked;
