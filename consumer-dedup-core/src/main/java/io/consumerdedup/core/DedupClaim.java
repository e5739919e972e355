package io.consumerdedup.core;

import io.consumerdedup.core.internal.LeaseRenewer;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicBoolean;
import org.jspecify.annotations.Nullable;

/**
 * A claim on a key, from {@link IdempotentExecutor#claim(DedupKey, String, String)}: either the key
 * had already succeeded ({@link #isDuplicate()}: do not run the handler), or the caller holds it
 * and must end the claim with exactly one of {@link #complete()} or {@link #fail(Throwable)} once
 * its handler has run. Until then the lease is renewed in the background; a claim never ended keeps
 * its key PROCESSING until that renewal stops with the executor and the lease runs out.
 */
public final class DedupClaim {
  private final @Nullable IdempotentExecutor executor;
  private final DedupKey key;
  private final int attempt;
  private final @Nullable String source;
  private final LeaseRenewer.@Nullable Renewal renewal;
  private final long startNanos = System.nanoTime();
  private final AtomicBoolean ended = new AtomicBoolean();

  private DedupClaim(
      @Nullable IdempotentExecutor executor,
      DedupKey key,
      int attempt,
      @Nullable String source,
      LeaseRenewer.@Nullable Renewal renewal) {
    this.executor = executor;
    this.key = key;
    this.attempt = attempt;
    this.source = source;
    this.renewal = renewal;
  }

  static DedupClaim duplicate(DedupKey key, int attempt) {
    return new DedupClaim(null, key, attempt, null, null);
  }

  static DedupClaim held(
      IdempotentExecutor executor,
      DedupKey key,
      int attempt,
      @Nullable String source,
      LeaseRenewer.@Nullable Renewal renewal) {
    return new DedupClaim(executor, key, attempt, source, renewal);
  }

  /** The key had already succeeded: the handler must not run, and there is nothing to end. */
  public boolean isDuplicate() {
    return executor == null;
  }

  public DedupKey key() {
    return key;
  }

  /** This claim's attempt (its fencing token); for a duplicate, the attempt that succeeded. */
  public int attempt() {
    return attempt;
  }

  @Nullable String source() {
    return source;
  }

  /**
   * Records SUCCESS: the handler has applied its effect.
   *
   * @throws DedupStoreException SUCCESS could not be recorded; the record stays PROCESSING until
   *     its lease expires
   * @throws IllegalStateException the claim is a duplicate or was already ended
   */
  public void complete() {
    holder("complete").complete(this, renewal, Duration.ofNanos(System.nanoTime() - startNanos));
  }

  /**
   * Records FAILED, so that the next delivery retries: the handler threw {@code error}. If FAILED
   * cannot be recorded, the store's error is added to {@code error} as suppressed.
   *
   * @throws IllegalStateException the claim is a duplicate or was already ended
   */
  public void fail(Throwable error) {
    holder("fail").fail(this, renewal, error);
  }

  private IdempotentExecutor holder(String operation) {
    if (executor == null) {
      throw new IllegalStateException(
          "Cannot " + operation + " a duplicate of " + key + ": the handler must not have run");
    }
    if (!ended.compareAndSet(false, true)) {
      throw new IllegalStateException("The claim on " + key + " was already ended");
    }
    return executor;
  }

  @Override
  public String toString() {
    return "DedupClaim{" + key + ", attempt " + attempt + (isDuplicate() ? ", duplicate}" : "}");
  }
}
