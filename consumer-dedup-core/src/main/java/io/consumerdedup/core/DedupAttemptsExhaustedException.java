package io.consumerdedup.core;

import java.util.Optional;
import org.jspecify.annotations.Nullable;

/**
 * The handler of a key has failed as many times as an adapter allows, counted in the dedup table
 * ({@link DedupRecord#attempts()}), so across restarts, rebalances and consumers: the adapter gives
 * the delivery up and dead-letters it now instead of running the handler again. Its cause is the
 * handler's exception when the last allowed attempt failed in this process (the Spring adapter
 * gives a stand-in with its description and stack trace for one that cannot describe itself);
 * {@link #lastError()} is the last error either way (as the table recorded it, when the attempts
 * were spent earlier).
 */
public class DedupAttemptsExhaustedException extends DedupException {
  private static final long serialVersionUID = 1L;

  private final int attempts;
  private final int maxAttempts;
  private final @Nullable String lastError;

  /**
   * @param attempts the failed attempts counted in the dedup table
   * @param maxAttempts the adapter's limit
   * @param lastError the handler's last error, null if unknown
   * @param cause the handler's exception, if its attempt failed in this process
   */
  public DedupAttemptsExhaustedException(
      DedupKey key,
      int attempts,
      int maxAttempts,
      @Nullable String lastError,
      @Nullable String source,
      @Nullable Throwable cause) {
    super(
        "Gave up after "
            + attempts
            + (attempts == 1 ? " failed attempt" : " failed attempts")
            + " of at most "
            + maxAttempts
            + " (counted in the dedup table, across restarts); last error: "
            + (lastError == null ? "unknown" : lastError),
        key,
        source,
        cause);
    this.attempts = attempts;
    this.maxAttempts = maxAttempts;
    this.lastError = lastError;
  }

  /** The failed attempts counted in the dedup table. */
  public int attempts() {
    return attempts;
  }

  /** The adapter's limit of attempts. */
  public int maxAttempts() {
    return maxAttempts;
  }

  /** The handler's last error, such as {@code java.lang.IllegalStateException: timeout}. */
  public Optional<String> lastError() {
    return Optional.ofNullable(lastError);
  }

  /** {@link Disposition#DEAD_LETTER}: its attempts are spent. */
  @Override
  public Disposition disposition() {
    return Disposition.DEAD_LETTER;
  }
}
