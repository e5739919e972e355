package io.consumerdedup.core.internal;

import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.atomic.AtomicBoolean;
import org.jspecify.annotations.Nullable;

/** An outcome to write: SUCCESS when {@code error} is null, else FAILED with it. */
public final class PendingOutcome {
  final DedupKey key;
  final int token;
  final @Nullable String source;
  final LeaseRenewer.Renewal renewal;
  final @Nullable String error;
  final Duration handlerTime;
  final AtomicBoolean settled = new AtomicBoolean();
  final CompletableFuture<Void> written = new CompletableFuture<>();
  final AtomicBoolean retrying = new AtomicBoolean();
  volatile boolean kept;

  /** The note of the operator's release its fenced write found, if it found one. */
  volatile @Nullable String releaseNote;

  volatile boolean lapseReported;
  volatile @Nullable ScheduledFuture<?> retries;

  /** While parked for its thread's next claim: when it goes to the writer thread instead. */
  volatile long parkedUntilNanos;

  private PendingOutcome(
      DedupKey key,
      int token,
      @Nullable String source,
      LeaseRenewer.Renewal renewal,
      @Nullable String error,
      Duration handlerTime) {
    this.key = key;
    this.token = token;
    this.source = source;
    this.renewal = renewal;
    this.error = error;
    this.handlerTime = handlerTime;
  }

  /**
   * The SUCCESS of the claim that {@code renewal} holds, whose handler took {@code handlerTime}:
   * from now on the renewal only keeps the lease until the outcome is written.
   */
  static PendingOutcome success(
      DedupKey key,
      int token,
      @Nullable String source,
      LeaseRenewer.Renewal renewal,
      Duration handlerTime) {
    renewal.settling();
    return new PendingOutcome(key, token, source, renewal, null, handlerTime);
  }

  /** The FAILED of the claim, with {@code error} to store; the renewal as for {@link #success}. */
  static PendingOutcome failure(
      DedupKey key,
      int token,
      @Nullable String source,
      LeaseRenewer.Renewal renewal,
      String error) {
    renewal.settling();
    return new PendingOutcome(key, token, source, renewal, error, Duration.ZERO);
  }

  String status() {
    return error == null ? "SUCCESS" : "FAILED";
  }

  /** The claim whose outcome this is. */
  public ClaimResult.Claimed claim() {
    return renewal.claim();
  }

  void cancelRetries() {
    ScheduledFuture<?> current = retries;
    if (current != null) {
      current.cancel(false);
    }
  }
}
