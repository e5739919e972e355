package io.consumerdedup.spring;

import io.consumerdedup.core.DedupException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.Disposition;
import org.jspecify.annotations.Nullable;

/**
 * The future or {@code Mono} of an {@link Idempotent} listener did not complete within {@code
 * consumer-dedup.async-listener-timeout}, or before its container stopped: the consumer thread
 * stops waiting for it, and the key's lease is no longer renewed. The record is retried later
 * ({@link Disposition#RETRY_LATER}): its redelivery finds the key in progress until the lease has
 * run out, then takes it over and runs the listener again. If the first call completes before that,
 * its outcome is written and the redelivery finds it; after that, its outcome is refused as the
 * write of a lease taken over. In a transaction of the container, which ends without the call's
 * work, the outcome the call reports is written as FAILED, so the redelivery runs it again.
 *
 * <p>Also thrown for a future cancelled, or timed out by {@code orTimeout}, outside a transaction
 * of the container: the work behind it may still run, so the key is left to its lease in the same
 * way, its outcome never written.
 */
public final class AsyncListenerTimeoutException extends DedupException {
  private static final long serialVersionUID = 1L;

  public AsyncListenerTimeoutException(String reason, DedupKey key, @Nullable String source) {
    super(reason, key, source, null);
  }

  AsyncListenerTimeoutException(
      String reason, DedupKey key, @Nullable String source, Throwable cause) {
    super(reason, key, source, cause);
  }

  @Override
  public Disposition disposition() {
    return Disposition.RETRY_LATER;
  }
}
