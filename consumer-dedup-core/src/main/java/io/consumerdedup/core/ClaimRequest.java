package io.consumerdedup.core;

import java.time.Duration;
import java.util.Objects;
import org.jspecify.annotations.Nullable;

/**
 * One claim of a key, as the executor asks a {@link DedupStore} for it.
 *
 * @param key the business key
 * @param owner the consumer instance that will hold the lease
 * @param lease how long the claim holds the key before another consumer may take it over
 * @param retention how long an abandoned claim is kept before the purge may delete it
 * @param fingerprint the payload fingerprint, or null when the executor does not compare payloads
 * @param source where the delivery came from (such as {@code payments-0@42}), or null
 */
public record ClaimRequest(
    DedupKey key,
    String owner,
    Duration lease,
    Duration retention,
    @Nullable String fingerprint,
    @Nullable String source) {

  public ClaimRequest {
    Objects.requireNonNull(key, "key");
    Objects.requireNonNull(owner, "owner");
    Objects.requireNonNull(lease, "lease");
    Objects.requireNonNull(retention, "retention");
  }
}
