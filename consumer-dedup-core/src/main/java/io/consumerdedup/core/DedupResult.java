package io.consumerdedup.core;

import java.util.Objects;
import org.jspecify.annotations.Nullable;

/**
 * What {@link IdempotentExecutor#execute} did.
 *
 * @param outcome PROCESSED (the handler ran) or DUPLICATE (it had already succeeded)
 * @param value what the handler returned; null for a duplicate
 * @param attempt the claim number: 1 for a first run, more for a retry or takeover; for a
 *     duplicate, the attempt that succeeded
 */
public record DedupResult<T>(Outcome outcome, @Nullable T value, int attempt) {

  public DedupResult {
    Objects.requireNonNull(outcome, "outcome");
  }

  public boolean isDuplicate() {
    return outcome == Outcome.DUPLICATE;
  }
}
