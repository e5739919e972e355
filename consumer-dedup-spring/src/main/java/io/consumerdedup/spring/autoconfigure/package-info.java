/** Spring Boot auto-configuration of consumer-dedup ({@code consumer-dedup.*} properties). */
@NullMarked
package io.consumerdedup.spring.autoconfigure;

import org.jspecify.annotations.NullMarked;
