/**
 * Implementation of the Spring adapters: not API, may change in any release. Use {@link
 * io.consumerdedup.spring.DedupContainers} and the auto-configuration instead.
 */
@NullMarked
package io.consumerdedup.spring.internal;

import org.jspecify.annotations.NullMarked;
